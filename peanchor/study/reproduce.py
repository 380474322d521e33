"""``peanchor reproduce``: run this shard's cells (train + analyse), then, unsharded, assemble ``results.json`` and
write the report.

::

    OUT/
      reproduce.json              the grid and settings of the last invocation (what `peanchor report` assembles)
      runs/<condition>-s<seed>/   a normal training run directory (config.yaml, model.safetensors, summary.json)
          analysis/               analysis.json + analysis.csv (peanchor.results.records)
      status/<cell>.json          the outcome of the last attempt at a cell ("ok", or "failed" with the error)
      results.json                every model and α-sweep point (peanchor.results.records.Results)
      report.md, report.html, figures/

Everything is incremental: a finished run is reused by ``train`` itself (and a half-finished one resumed), an
analysis is reused when :func:`peanchor.study.pipeline.reusable` says so, and ``results.json``/the report are
rewritten only when their content changes. A failing cell is recorded and the others go on; the caller gets a
non-zero exit at the end.

Imports: the rest of :mod:`peanchor.study`, :mod:`peanchor.core.interrupts`, :mod:`peanchor.core.fileio`, :mod:`peanchor.results.records`,
:mod:`peanchor.report` (its public ``write_report``), :mod:`peanchor.training` and :mod:`peanchor.data` (preflight
checks), :mod:`peanchor.core.tracking` (``--tensorboard``).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peanchor.core import fileio, interrupts
from peanchor.core.errors import ConfigError
from peanchor.results.records import Results
from peanchor.study.assemble import MANIFEST, read_json, update_results
from peanchor.study.cells import Cell, shard_cells
from peanchor.study.executor import attempt_cells
from peanchor.study.memory import (
    ARRAY_DATASETS,
    JobPlan,
    cell_peak_bytes,
    memory_available,
    plan_jobs,
)
from peanchor.study.options import ReproduceOptions
from peanchor.study.pipeline import eval_data_key, stderr_log

__all__ = ["ReproduceOutcome", "reproduce", "write_results_and_report"]

REPORT_FILES = ("report.md", "report.html")


@dataclass
class ReproduceOutcome:
    cells: list[Cell]
    failed: list[dict[str, Any]]
    results: Results | None
    wrote_report: bool
    did_work: bool


def write_results_and_report(
    out: str | Path, wall_start: float | None = None, *, force: bool = False
) -> tuple[Results, bool]:
    """Assemble ``OUT/results.json`` and write the report; skipped when nothing changed and the report is there
    (unless ``force``). Returns the results and whether anything was written."""
    from peanchor.report import write_report

    out = Path(out)
    report_present = all((out / name).exists() for name in REPORT_FILES)
    results, wrote = update_results(out, wall_start, force=force or not report_present)
    if wrote:
        write_report(results, out)
    return results, wrote


def _manifest(options: ReproduceOptions) -> dict[str, Any]:
    first = options.cells()[0]
    return {
        "preset": options.preset,
        "conditions": [c.name for c in options.conditions],
        "seeds": list(range(options.seeds or 1)),
        "data": options.cell_config(first).data.to_dict(),
        "set": [str(item) for item in options.set_items],
        "shifts": list(options.shifts),
        # The grid's analysis plan, at the first cell's config: its α grid as planned, also where that cell is an
        # RPT model (analysed without the sweep, ReproduceOptions.plan_for) or its PE is not scalable.
        "analysis": options.grid_plan(first).to_dict(),
    }  # fmt: skip


def _preflight(options: ReproduceOptions, cells: Sequence[Cell]) -> tuple[int, int]:
    """Refuse, before anything under OUT is touched, what would make every cell fail the same way:
    a run directory that holds a different config (e.g. a rerun with another ``--set``), or data that
    cannot be read (a missing ``--data-root``), a ``--shift`` that does not fit the images. Per-cell failures (a
    diverging run) are recorded instead. Returns the most evaluation images and classes (for the memory estimate)."""
    from peanchor.data import build_eval_dataset
    from peanchor.training.run_dir import check_run_dir

    checked: set[str] = set()
    images, classes = 0, 0
    for cell in cells:
        config = options.cell_config(cell)
        check_run_dir(config, options.cell_dir(cell))  # read-only; RunDirError names the differing keys
        options.plan_for(cell)  # e.g. a blur kernel too large for the images, a bad --set analysis.KEY
        key = json.dumps(eval_data_key(config.data.to_dict()), sort_keys=True)
        if key not in checked:
            checked.add(key)
            val, info = build_eval_dataset(config.data)  # DataError for a missing root / an empty split
            images, classes = max(images, len(val)), max(classes, info.num_classes)  # type: ignore[arg-type]
    return images, classes


def _job_plan(options: ReproduceOptions, cells: Sequence[Cell], eval_images: int, classes: int) -> JobPlan:
    """How many of ``cells`` run at once (``--jobs``, bounded by memory under ``auto``) and the line saying why."""
    from peanchor.study.executor import cells_on_gpus
    from peanchor.study.resources import usable_cpus, visible_gpus

    on_gpu = cells_on_gpus(options.device) or (options.device or "").startswith("cuda")
    cpus = usable_cpus()
    bound = f"{len(visible_gpus())} GPUs" if on_gpu else f"{cpus} CPUs"
    if options.jobs_auto and options.jobs == 1 and len(cells) > 1:
        bound = "one at a time for this preset or device"
    per_cell = 0.0
    for cell in cells[:1] + [c for c in cells[1:] if options.cell_set_items(c) != options.cell_set_items(cells[0])]:
        config, plan = options.cell_config(cell), options.plan_for(cell)
        images = min(eval_images, plan.max_images or eval_images)
        per_cell = max(per_cell, cell_peak_bytes(
            config, eval_images=images, shifts=len(plan.shifts), severities=plan.severities, on_gpu=on_gpu,
            cpus=cpus, num_classes=classes or 1000, image_files=config.data.name not in ARRAY_DATASETS,
        ))  # fmt: skip
    return plan_jobs(len(cells), options.jobs, options.jobs_auto, bound, per_cell, memory_available())


def _log_figures(out: Path, *, again: bool) -> None:
    """The report's figures into OUT/tensorboard: when the report was (re)written, or once for an older report."""
    from peanchor.core.tracking import (
        TENSORBOARD_DIR,
        TensorBoardLog,
        has_events,
        log_figures,
    )

    if again or not has_events(out / TENSORBOARD_DIR):
        with TensorBoardLog(out / TENSORBOARD_DIR) as log:
            log_figures(log, sorted((out / "figures").glob("*.png")))


def reproduce(options: ReproduceOptions, log: Callable[[str], None] = stderr_log) -> ReproduceOutcome:
    """Run this shard's cells (train + analyse), then (unsharded) assemble results.json and the report.

    SIGTERM/SIGINT stop it cleanly: the cell in training writes a resumable checkpoint, every lock is released,
    and :class:`~peanchor.core.interrupts.Interrupted` is raised (exit code 143 / 130); rerunning continues.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise ConfigError(
            "peanchor reproduce runs whole cells, one process each, and does not run under torchrun: on one "
            "multi-GPU node use `peanchor reproduce --jobs N` (one cell per GPU); to train one cell on several "
            "GPUs, launch its `peanchor train` line from `peanchor reproduce --list` with torchrun, then rerun "
            "reproduce without torchrun to analyse and report"
        )
    with interrupts.handling():
        return _reproduce(options, log)


def _reproduce(options: ReproduceOptions, log: Callable[[str], None]) -> ReproduceOutcome:
    start = time.perf_counter()
    out = options.out_dir
    index, count = options.shard
    cells = options.cells()
    mine = shard_cells(cells, index, count)
    for cell in cells:  # every config and plan resolves (a bad --set fails here, before any training)
        options.plan_for(cell)
    eval_images, classes = _preflight(options, mine)
    jobs = _job_plan(options, mine, eval_images, classes) if mine else None
    lock_dir = out if count == 1 else out / "shards" / f"{index}-of-{count}"
    failed: list[dict[str, Any]] = []
    did_work = False
    with fileio.RunLock(lock_dir):  # a refused lock is the only line
        if jobs is not None:
            log(jobs.line)
            if jobs.warning:
                log(f"warning: {jobs.warning}")
            options = options.with_runtime(jobs=jobs.jobs)
        manifest = _manifest(options)
        if read_json(out / MANIFEST) != manifest:
            fileio.write_json(out / MANIFEST, manifest)
        with contextlib.closing(attempt_cells(options, mine, log)) as outcomes:  # closed early on a stop signal
            for n, (cell, status) in enumerate(outcomes, 1):
                did_work = _record(out, cell, status, f"[{n}/{len(mine)}] {cell.name}", failed, log) or did_work
        results, wrote = None, False
        if count == 1:
            results, wrote = write_results_and_report(out, start if did_work else None)
            if options.tensorboard:
                _log_figures(out, again=wrote)
    return ReproduceOutcome(cells=mine, failed=failed, results=results, wrote_report=wrote, did_work=did_work)


def _record(
    out: Path, cell: Cell, status: dict[str, Any], prefix: str, failed: list[dict[str, Any]], log: Callable[[str], None]
) -> bool:
    """Log a cell's outcome and write its status file (when it changed); True if the cell did any work."""
    worked = bool(status.get("trained") or status.get("analyzed"))
    if status["status"] == "failed":
        failed.append(status)
        log(f"{prefix}: FAILED ({status['error']})")
    elif not worked:
        log(f"{prefix}: reused")
    status_path = out / "status" / f"{cell.name}.json"
    previous = read_json(status_path)
    if not isinstance(previous, dict) or any(previous.get(k) != status.get(k) for k in ("status", "error")):
        fileio.write_json(status_path, status)
    return worked or status["status"] == "failed"
