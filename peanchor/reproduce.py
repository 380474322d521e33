"""Reproduce the study: a grid of conditions × seeds, each trained, analysed, then assembled and reported.

::

    OUT/
      reproduce.json          the grid and settings of the last invocation (what `peanchor report` assembles)
      runs/<condition>-s<seed>/   a normal training run directory (config.yaml, model.safetensors, summary.json)
          analysis/           analysis.json + analysis.csv (peanchor.analysis.evaluate)
      status/<cell>.json      the outcome of the last attempt at a cell ("ok", or "failed" with the error)
      results.json            every model and α-sweep point (schema: README, "Results")
      report.md, report.html, figures/

Everything is incremental: a finished run is reused by ``train`` itself (and a half-finished one
resumed), an analysis is reused when it is complete and was made from the same weights with the
same settings, and ``results.json``/the report are rewritten only when their content changes. A
failing cell is recorded and the others go on; the caller gets a non-zero exit at the end.

Cells are ordered seed-major (every condition of seed 0, then seed 1, ...) so that an interrupted
run has compared every condition early. ``--shard i/n`` takes cells ``i-1, i-1+n, ...`` (round-robin).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peanchor import fileio
from peanchor.conditions import DEFAULT_CONDITIONS, Condition, parse_condition, parse_conditions
from peanchor.errors import ConfigError, PeanchorError
from peanchor.presets import AnalysisPlan, get_preset, preset_shifts, resolve_config

__all__ = [
    "DEFAULT_CONDITIONS",
    "AnalysisPlan",
    "Cell",
    "Condition",
    "ReproduceOptions",
    "assemble_results",
    "grid_cells",
    "list_commands",
    "parse_condition",
    "parse_conditions",
    "parse_shard",
    "reproduce",
    "shard_cells",
    "split_set_items",
    "write_results_and_report",
]

MANIFEST = "reproduce.json"
RESULTS = "results.json"


# ----------------------------------------------------------------------------------------------
# The grid


@dataclass(frozen=True)
class Cell:
    """One (condition, seed) of the grid; ``index`` is its position in the grid."""

    index: int
    condition: Condition
    seed: int

    @property
    def name(self) -> str:
        return f"{self.condition.name}-s{self.seed}"


def grid_cells(conditions: Sequence[Condition], seeds: int | Sequence[int]) -> list[Cell]:
    """Every (condition, seed), seed-major.

    >>> [c.name for c in grid_cells(parse_conditions("none,rpt"), 2)]
    ['none-s0', 'rpt-s0', 'none-s1', 'rpt-s1']
    """
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    pairs = [(c, s) for s in seed_list for c in conditions]
    return [Cell(i, c, s) for i, (c, s) in enumerate(pairs)]


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` → ``(2, 4)``: shard 2 of 4, 1-based.

    >>> parse_shard("1/3")
    (1, 3)
    """
    try:
        i_text, n_text = text.split("/")
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise ConfigError(f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. 1/4") from None
    if not 1 <= i <= n:
        raise ConfigError(f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. 1/4")
    return i, n


def shard_cells(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The cells of shard ``index`` of ``count`` (1-based): round-robin by cell index.

    >>> cells = grid_cells(parse_conditions("none,ape,rope"), 2)
    >>> [c.index for c in shard_cells(cells, 1, 4)], [c.index for c in shard_cells(cells, 4, 4)]
    ([0, 4], [3])
    """
    if not 1 <= index <= count:
        raise ConfigError(f"shard {index}/{count}: expected 1 <= i <= n")
    return [c for c in cells if c.index % count == index - 1]


def split_set_items(items: Sequence[str], conditions: Sequence[Condition]) -> tuple[list[str], dict[str, list[str]]]:
    """``--set`` items for every cell, and those prefixed ``<condition>:`` for one condition only.

    >>> split_set_items(["optim.lr=3e-4", "ape:optim.pe_lr_mult=10"], parse_conditions("none,ape"))
    (['optim.lr=3e-4'], {'ape': ['optim.pe_lr_mult=10']})
    """
    names = {c.name for c in conditions}
    common: list[str] = []
    per: dict[str, list[str]] = {}
    for item in items:
        key = item.partition("=")[0]
        if ":" in key:
            prefix, _, rest = item.partition(":")
            cond = prefix.strip().lower()
            if cond not in names:
                raise ConfigError(
                    f"--set {item!r}: {cond!r} is not a condition of this grid ({', '.join(sorted(names))})"
                )
            per.setdefault(cond, []).append(rest)
        else:
            common.append(item)
    return common, per


# ----------------------------------------------------------------------------------------------
# Options


@dataclass
class ReproduceOptions:
    preset: str = "cpu"
    out: Path | None = None  # default runs/reproduce-<preset>
    conditions: list[Condition] = field(default_factory=lambda: parse_conditions(DEFAULT_CONDITIONS))
    seeds: int | None = None  # default DEFAULT_SEEDS[preset]
    data: str | None = None
    data_root: str | None = None
    class_list: str | None = None
    set_items: list[str] = field(default_factory=list)
    severities: bool = False
    shard: tuple[int, int] = (1, 1)
    device: str | None = None
    progress: bool = True
    debug: bool = False  # re-raise a cell's error instead of recording it
    jobs: int = 1  # cells run at once, each in its own single-threaded process (CPU)

    def __post_init__(self) -> None:
        if self.seeds is None:
            self.seeds = get_preset(self.preset).seeds
        if self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: expected >= 1")
        if self.jobs < 1:
            raise ConfigError(f"--jobs {self.jobs}: expected >= 1")
        self.out = Path(self.out) if self.out is not None else Path("runs") / f"reproduce-{self.preset}"

    @property
    def out_dir(self) -> Path:
        assert self.out is not None
        return self.out

    @property
    def plan(self) -> AnalysisPlan:
        return get_preset(self.preset).analysis

    def cells(self) -> list[Cell]:
        assert self.seeds is not None
        return grid_cells(self.conditions, self.seeds)

    def cell_dir(self, cell: Cell) -> Path:
        return self.out_dir / "runs" / cell.name

    def cli_overrides(self, cell: Cell) -> dict[str, Any]:
        return {
            "data.name": self.data,
            "data.root": self.data_root,
            "data.class_list": self.class_list,
            "model.pe": cell.condition.pe,
            "train.rpt": cell.condition.rpt,
            "train.seed": cell.seed,
            "train.device": self.device,
        }

    def cell_set_items(self, cell: Cell) -> list[str]:
        common, per = split_set_items(self.set_items, self.conditions)
        return common + per.get(cell.condition.name, [])

    def cell_config(self, cell: Cell) -> Any:
        return resolve_config(self.preset, self.cli_overrides(cell), self.cell_set_items(cell))

    def analysis_settings(self, eval_batch_size: int) -> dict[str, Any]:
        """The settings an analysis must have been made with to be reused (see ``analysis_is_current``)."""
        plan = self.plan
        return {
            "rpi_draws": plan.rpi_draws, "seed": plan.seed, "ssdc_mode": "mean_similarity", "metric": "manhattan",
            "bootstrap": 0, "severities": self.severities, "batch_size": eval_batch_size,
        }  # fmt: skip


# ----------------------------------------------------------------------------------------------
# --list


def list_commands(options: ReproduceOptions, argv_tail: Sequence[str] = ()) -> list[str]:
    """One ``peanchor train`` line per cell (exactly the config ``reproduce`` would train), then the final steps.

    ``argv_tail`` is the reproduce invocation's own arguments (to echo in the final ``reproduce`` line).
    """
    q = shlex.quote
    lines = []
    for cell in options.cells():
        parts = ["peanchor", "train", "--preset", options.preset, "--pe", cell.condition.pe, "--seed", str(cell.seed)]
        if cell.condition.rpt:
            parts.append("--rpt")
        for flag, value in (("--data", options.data), ("--data-root", options.data_root),
                            ("--class-list", options.class_list), ("--device", options.device)):  # fmt: skip
            if value is not None:
                parts += [flag, value]
        for item in options.cell_set_items(cell):
            parts += ["--set", item]
        parts += ["--out", str(options.cell_dir(cell))]
        lines.append(" ".join(q(p) for p in parts))
    tail = [a for a in argv_tail]
    lines.append("# then analyse every cell and write the report (trained cells are reused):")
    lines.append(" ".join(q(p) for p in ["peanchor", "reproduce", *tail]))
    lines.append("# or, once every cell has its analysis (e.g. after sharded runs), only assemble the report:")
    lines.append(" ".join(q(p) for p in ["peanchor", "report", str(options.out_dir)]))
    return lines


# ----------------------------------------------------------------------------------------------
# Running cells


def _stderr(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"peanchor: {message}", file=sys.stderr)


class _Evaluation:
    """What analyses share inside one process: evaluation sets (loaded once per data spec) and corrupted copies."""

    def __init__(self, progress: bool | None) -> None:
        from peanchor.analysis.corruptions import CorruptedCache

        self.progress = progress
        self.cache = CorruptedCache(progress=progress)
        self.evalsets: dict[str, Any] = {}

    def evalset(self, spec: Any, max_images: int | None) -> Any:
        from peanchor.analysis.evaluate import EvalSet

        key = json.dumps([_eval_data_key(spec.to_dict()), max_images], sort_keys=True)
        if key not in self.evalsets:
            self.evalsets[key] = EvalSet.from_spec(spec, max_images, progress=self.progress)
        return self.evalsets[key]


def _eval_data_key(data: dict[str, Any]) -> dict[str, Any]:
    # Fields that do not change the evaluation split (training-only settings, caches).
    return {k: v for k, v in data.items() if k not in ("augment", "cache_dir", "train_size")}


def _status_path(options: ReproduceOptions, cell: Cell) -> Path:
    return options.out_dir / "status" / f"{cell.name}.json"


def _run_cell(
    options: ReproduceOptions, cell: Cell, evaluation: _Evaluation, log: Callable[[str], None], status: dict[str, Any]
) -> None:
    """Train (or reuse) and analyse (or reuse) one cell, filling ``status`` as it goes (its ``stage``
    says where an exception came from)."""
    from peanchor.analysis.evaluate import (
        EvalSet,
        analysis_is_current,
        evaluate_model,
        read_analysis,
        write_analysis,
    )
    from peanchor.analysis.corruptions import evaluation_shifts
    from peanchor.checkpoint import load_model, model_digest
    from peanchor.training.loop import train

    run_dir = options.cell_dir(cell)
    status["stage"] = "config"
    config = options.cell_config(cell)
    status["stage"] = "train"
    summary = train(config, run_dir, progress=options.progress)
    if summary.get("status") == "stopped":
        raise PeanchorError(f"training of {run_dir} stopped before its last epoch")
    trained = summary.get("status") != "already_finished"
    status["trained"] = trained
    if trained:
        log(f"{cell.name}: trained, val acc {summary.get('val_acc', math.nan):.4f} ({summary.get('seconds', 0):.0f} s)")

    status["stage"] = "analyze"
    plan = options.plan
    alphas = list(plan.alphas) if not cell.condition.rpt else []  # the sweep is for models trained with a PE
    batch_size = plan.batch_size or config.train.eval_batch_size
    settings = options.analysis_settings(batch_size)
    digest = model_digest(run_dir)
    data = config.data.to_dict()
    doc = read_analysis(run_dir / "analysis")
    current = analysis_is_current(doc, settings, digest) and doc is not None
    if current:
        src = doc.get("source", {})
        same_data = _eval_data_key(src.get("data", {})) == _eval_data_key(data) and src.get("max_images") == plan.max_images
        same_alphas = doc.get("settings", {}).get("alphas") == ([] if not doc.get("model", {}).get("scalable") else alphas)
        current = same_data and same_alphas
    if current:
        status["analyzed"] = False
    else:
        evalset: EvalSet = evaluation.evalset(config.data, plan.max_images)
        model = load_model(run_dir)
        shifts = evaluation_shifts(preset_shifts(config.preset, evalset.img_size), evalset.img_size)
        result = evaluate_model(
            model, evalset, evalset.info, shifts=shifts, alphas=alphas, rpi_draws=plan.rpi_draws, seed=plan.seed,
            severities=options.severities, batch_size=batch_size, device=options.device,
            progress=None if options.progress else False, cache=evaluation.cache,
        )  # fmt: skip
        source = {
            "kind": "run_dir", "run_dir": str(run_dir), "model_digest": digest, "model_args": model.model_args,
            "condition": cell.condition.name, "seed": cell.seed, "data": data, "max_images": plan.max_images,
        }  # fmt: skip
        write_analysis(result, run_dir / "analysis", source)
        status["analyzed"] = True
        log(f"{cell.name}: analysed, {result['forward_passes']} passes in {result['seconds']:.1f} s "
            f"(clean {result['clean_acc']:.3f}, ΔSSDC {result['delta_ssdc']:.3f})")  # fmt: skip
    status["stage"] = "done"
    status["status"] = "ok"


# ----------------------------------------------------------------------------------------------
# Assembling results.json


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _newer(a: Path, b: Path) -> bool:
    """Whether file ``a`` exists and was written after ``b``."""
    try:
        return a.stat().st_mtime_ns > b.stat().st_mtime_ns
    except OSError:
        return False


def _versions() -> dict[str, str]:
    import numpy
    import torch
    import torchvision

    from peanchor import __version__

    return {
        "peanchor": __version__, "torch": torch.__version__, "torchvision": torchvision.__version__,
        "numpy": numpy.__version__, "python": platform.python_version(),
    }  # fmt: skip


def _cells_from_manifest(out: Path, manifest: dict[str, Any] | None) -> tuple[list[Cell], dict[str, Any]]:
    """The grid to assemble: the manifest's, or every run under OUT/runs with an analysis."""
    if manifest:
        conditions = parse_conditions(manifest.get("conditions") or [])
        return grid_cells(conditions, manifest.get("seeds") or [0]), manifest
    cells: list[Cell] = []
    for run_dir in sorted((out / "runs").glob("*")):
        summary = _read_json(run_dir / "summary.json")
        if not isinstance(summary, dict) or not (run_dir / "analysis" / "analysis.json").exists():
            continue
        cond = parse_condition(str(summary.get("condition", run_dir.name.rsplit("-s", 1)[0])))
        cells.append(Cell(len(cells), cond, int(summary.get("seed", 0))))
    first = _read_json(out / "runs" / cells[0].name / "summary.json") if cells else None
    inferred = {
        "preset": (first or {}).get("preset"),
        "conditions": list(dict.fromkeys(c.condition.name for c in cells)),
        "seeds": sorted({c.seed for c in cells}),
        "data": {"name": (first or {}).get("data"), "img_size": (first or {}).get("img_size")},
    }
    return cells, inferred


def assemble_results(out: str | Path, wall_seconds: float | None = None) -> dict[str, Any]:
    """``results.json`` content from the files under ``out`` (manifest, run summaries, analyses, statuses).

    Reads result files only. A cell with a complete analysis is a model; one whose last attempt
    failed is listed under ``failed``; one never attempted under ``missing``.
    """
    from peanchor.analysis.evaluate import RESULT_KEYS, read_analysis

    out = Path(out)
    manifest = _read_json(out / MANIFEST)
    cells, meta = _cells_from_manifest(out, manifest if isinstance(manifest, dict) else None)
    models: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []
    failed: list[dict[str, Any]] = []
    missing: list[str] = []
    shifts: dict[str, Any] = {}
    severity_table = None
    compute = 0.0
    for cell in cells:
        run_dir = out / "runs" / cell.name
        status = _read_json(out / "status" / f"{cell.name}.json")
        analysis = read_analysis(run_dir / "analysis")
        summary = _read_json(run_dir / "summary.json")
        if isinstance(status, dict) and status.get("status") == "failed" and not _newer(
            run_dir / "analysis" / "analysis.json", out / "status" / f"{cell.name}.json"
        ):  # an analysis made after the failure (e.g. by hand) wins
            failed.append({"name": cell.name, "condition": cell.condition.name, "seed": cell.seed,
                           "stage": status.get("stage"), "error": status.get("error")})  # fmt: skip
            continue
        if analysis is None or any(k not in analysis for k in RESULT_KEYS) or not isinstance(summary, dict):
            missing.append(cell.name)
            continue
        shifts = shifts or analysis["shifts"]
        severity_table = severity_table or analysis.get("severity_table")
        train = {"val_acc": summary.get("val_acc"), "seconds": summary.get("seconds"), "epochs": summary.get("epochs")}
        compute += float(train["seconds"] or 0.0) + float(analysis.get("seconds") or 0.0)
        entry: dict[str, Any] = {
            "name": cell.name, "condition": cell.condition.name, "pe": cell.condition.pe, "rpt": cell.condition.rpt,
            "seed": cell.seed, "clean_acc": analysis["clean_acc"], "rpi_acc": analysis["rpi_acc"],
            "ssdc": analysis["ssdc"], "delta_ssdc": analysis["delta_ssdc"], "acc": analysis["acc"],
            "fragility": analysis["fragility"],
        }  # fmt: skip
        for key in ("severities", "severity_fragility"):
            if key in analysis:
                entry[key] = analysis[key]
        entry.update(train=train, run_dir=str(run_dir), analysis_seconds=analysis.get("seconds"),
                     forward_passes=analysis.get("forward_passes"))  # fmt: skip
        models.append(entry)
        for point in analysis["alpha_sweep"]:
            sweep.append({
                "model": cell.name, "condition": cell.condition.name, "seed": cell.seed, "alpha": point["alpha"],
                "delta_ssdc": point["delta_ssdc"], "clean_acc": point["clean_acc"], "acc": point["acc"],
                "fragility": point["fragility"],
            })  # fmt: skip
    data = meta.get("data") or {}
    if not shifts and isinstance(data.get("img_size"), int):  # no analysis yet: the shifts it would use
        from peanchor.analysis.corruptions import paper_shifts

        shifts = {k: v.describe() for k, v in paper_shifts(data["img_size"]).items()}
    results: dict[str, Any] = {
        "preset": meta.get("preset"),
        "dataset": data.get("name"),
        "img_size": data.get("img_size"),
        "shifts": shifts,
        "conditions": list(meta.get("conditions") or []),
        "seeds": list(meta.get("seeds") or []),
        "models": models,
        "alpha_sweep": sweep,
        "failed": failed,
        "missing": missing,
        "wall_seconds": wall_seconds,
        "compute_seconds": compute,
        "versions": _versions(),
    }
    if severity_table:
        results["severity_table"] = severity_table
    if meta.get("analysis"):
        results["analysis"] = meta["analysis"]
    return results


def _same_results(a: dict[str, Any], b: Any) -> bool:
    ignore = ("wall_seconds", "versions")
    if not isinstance(b, dict):
        return False

    def strip(d: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in d.items() if k not in ignore}, sort_keys=True)

    return strip(a) == strip(b)


def write_results_and_report(
    out: str | Path, wall_start: float | None = None, *, force: bool = False
) -> tuple[dict[str, Any], bool]:
    """Assemble ``OUT/results.json`` and write the report; skipped when nothing changed (unless ``force``).

    Returns the results and whether anything was written.
    """
    from peanchor.report import write_report

    out = Path(out)
    previous = _read_json(out / RESULTS)
    results = assemble_results(out)
    report_present = (out / "report.md").exists() and (out / "report.html").exists()
    if not force and report_present and _same_results(results, previous):
        return previous, False
    results["wall_seconds"] = (time.perf_counter() - wall_start) if wall_start is not None else (
        previous.get("wall_seconds") if isinstance(previous, dict) else None)  # fmt: skip
    fileio.write_json(out / RESULTS, results)
    write_report(results, out)
    return results, True


# ----------------------------------------------------------------------------------------------
# The whole thing


@dataclass
class ReproduceOutcome:
    cells: list[Cell]
    failed: list[dict[str, Any]]
    results: dict[str, Any] | None
    wrote_report: bool
    did_work: bool


def _manifest(options: ReproduceOptions) -> dict[str, Any]:
    first = options.cell_config(options.cells()[0])
    plan = options.plan
    return {
        "preset": options.preset,
        "conditions": [c.name for c in options.conditions],
        "seeds": list(range(options.seeds or 1)),
        "data": first.data.to_dict(),
        "set": list(options.set_items),
        "analysis": {"alphas": list(plan.alphas), "max_images": plan.max_images, "rpi_draws": plan.rpi_draws,
                     "seed": plan.seed, "batch_size": plan.batch_size or first.train.eval_batch_size,
                     "severities": options.severities},
    }  # fmt: skip


def _preflight(options: ReproduceOptions, cells: Sequence[Cell]) -> None:
    """Refuse, before anything under OUT is touched, what would make every cell fail the same way:
    a run directory that holds a different config (e.g. a rerun with another ``--set``), or data that
    cannot be read (a missing ``--data-root``). Per-cell failures (a diverging run) are recorded instead."""
    from peanchor.data import build_eval_dataset
    from peanchor.training.loop import check_run_dir

    checked: set[str] = set()
    for cell in cells:
        config = options.cell_config(cell)
        check_run_dir(config, options.cell_dir(cell))  # read-only; RunDirError names the differing keys
        key = json.dumps(_eval_data_key(config.data.to_dict()), sort_keys=True)
        if key not in checked:
            checked.add(key)
            build_eval_dataset(config.data)  # DataError for a missing root / an empty split


def _attempt(
    options: ReproduceOptions, cell: Cell, evaluation: _Evaluation, log: Callable[[str], None]
) -> dict[str, Any]:
    """Run one cell; a failure becomes ``status="failed"`` with the error instead of an exception."""
    status: dict[str, Any] = {"name": cell.name, "condition": cell.condition.name, "seed": cell.seed}
    try:
        _run_cell(options, cell, evaluation, log, status)
    except KeyboardInterrupt:
        raise
    except Exception as e:  # one failed cell must not stop the others
        if options.debug:
            raise
        status.update(status="failed", error=f"{type(e).__name__}: {e}")
    return status


_WORKER_EVALUATION: _Evaluation | None = None


def _worker_init(parent: int) -> None:
    import os
    import signal

    import torch

    # Small models on a few cores: one thread per process beats intra-op threads by a wide margin.
    torch.set_num_threads(1)
    # A worker must not outlive a killed parent (it would keep training into OUT, holding cell locks).
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the request took effect
        os._exit(1)


def _worker_attempt(options: ReproduceOptions, cell: Cell) -> dict[str, Any]:
    global _WORKER_EVALUATION
    if _WORKER_EVALUATION is None:  # evaluation sets and corrupted copies are shared within a worker
        _WORKER_EVALUATION = _Evaluation(False)
    return _attempt(options, cell, _WORKER_EVALUATION, _stderr)


def _attempt_cells(
    options: ReproduceOptions, cells: Sequence[Cell], log: Callable[[str], None]
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Yield ``(cell, status)`` as cells finish: in order in this process, or from ``options.jobs``
    worker processes (spawned, one thread each; progress bars off, one log line per cell)."""
    if options.jobs == 1 or len(cells) <= 1:
        evaluation = _Evaluation(None if options.progress else False)
        for cell in cells:
            yield cell, _attempt(options, cell, evaluation, log)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    quiet = dataclasses.replace(options, progress=False, debug=False)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that already runs torch threads
    log(f"running {len(cells)} cells in {min(options.jobs, len(cells))} processes")
    pool = ProcessPoolExecutor(
        min(options.jobs, len(cells)), mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(),)
    )
    with pool:
        futures = {pool.submit(_worker_attempt, quiet, cell): cell for cell in cells}
        for future in as_completed(futures):
            yield futures[future], future.result()


def reproduce(options: ReproduceOptions, log: Callable[[str], None] = _stderr) -> ReproduceOutcome:
    """Run this shard's cells (train + analyse), then (unsharded) assemble results.json and the report."""
    start = time.perf_counter()
    out = options.out_dir
    index, count = options.shard
    cells = options.cells()
    mine = shard_cells(cells, index, count)
    for cell in cells:  # every config resolves (a bad --set fails here, before any training)
        options.cell_config(cell)
    _preflight(options, mine)
    lock_dir = out if count == 1 else out / "shards" / f"{index}-of-{count}"
    failed: list[dict[str, Any]] = []
    did_work = False
    with fileio.RunLock(lock_dir):
        manifest = _manifest(options)
        if _read_json(out / MANIFEST) != manifest:
            fileio.write_json(out / MANIFEST, manifest)
        for n, (cell, status) in enumerate(_attempt_cells(options, mine, log), 1):
            prefix = f"[{n}/{len(mine)}] {cell.name}"
            if status["status"] == "failed":
                failed.append(status)
                log(f"{prefix}: FAILED ({status['error']})")
                did_work = True
            else:
                did_work = did_work or bool(status.get("trained") or status.get("analyzed"))
                if not (status.get("trained") or status.get("analyzed")):
                    log(f"{prefix}: reused")
            previous = _read_json(_status_path(options, cell))
            if not isinstance(previous, dict) or {k: previous.get(k) for k in ("status", "error")} != {
                k: status.get(k) for k in ("status", "error")
            }:
                fileio.write_json(_status_path(options, cell), status)
        results, wrote = None, False
        if count == 1:
            results, wrote = write_results_and_report(out, start if did_work else None, force=False)
    return ReproduceOutcome(cells=mine, failed=failed, results=results, wrote_report=wrote, did_work=did_work)
