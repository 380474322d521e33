"""One cell, start to finish: train it (or reuse the finished run), then analyse it (or reuse its analysis).

Whether a stored analysis can be reused is decided here and nowhere else (:func:`reusable`): it must be of this
schema, made from the same weights, on the same evaluation data, with an equal analysis plan (settings, α grid,
shifts, lenses: a ``--shift`` or ``--set analysis.*`` that changes one, adds one or is dropped again means
analysing again; where a shift came from does not count). A reused analysis in which a lens failed has that lens
(and nothing else) measured again.

Imports: :mod:`peanchor.training`, :mod:`peanchor.checkpoint.files`, :mod:`peanchor.analysis`, :mod:`peanchor.results.records`,
:mod:`peanchor.core.interrupts`, :mod:`peanchor.study.options`, :mod:`peanchor.core.tracking` (``--tensorboard``),
:mod:`peanchor.data` (the data spec's paths); torch-heavy
ones inside the functions that use them.
"""

from __future__ import annotations

import contextlib
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peanchor.core import interrupts
from peanchor.core.errors import PeanchorError, SchemaError
from peanchor.core.interrupts import Interrupted
from peanchor.results.records import ANALYSIS_JSON, AnalysisResult, read_analysis
from peanchor.study.cells import Cell
from peanchor.study.options import ReproduceOptions

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.analysis.plan import AnalysisPlan

__all__ = [
    "Evaluation", "attempt", "eval_data_key", "out_of_memory_message", "peak_rss_mb", "reusable", "stderr_log",
]  # fmt: skip


def stderr_log(message: str) -> None:
    from tqdm.auto import tqdm

    tqdm.write(f"peanchor: {message}", file=sys.stderr)


def eval_data_key(data: dict[str, Any]) -> dict[str, Any]:
    """A data spec without the fields that do not change the evaluation split (training-only settings, caches), its
    paths resolved (a relative path and the absolute path of the same folder are the same data)."""
    from peanchor.data.spec import with_resolved_paths

    return with_resolved_paths({k: v for k, v in data.items() if k not in ("augment", "cache_dir", "train_size")})


class Evaluation:
    """What analyses share inside one process: evaluation sets (loaded once per data spec) and corrupted copies."""

    def __init__(self, progress: bool | None) -> None:
        from peanchor.analysis.corrupted_sets import CorruptedCache

        self.progress = progress
        self.cache = CorruptedCache(progress=progress)
        self.evalsets: dict[str, Any] = {}

    def evalset(self, spec: Any, max_images: int | None) -> Any:
        from peanchor.analysis.evalset import EvalSet

        key = json.dumps([eval_data_key(spec.to_dict()), max_images], sort_keys=True)
        if key not in self.evalsets:
            self.evalsets[key] = EvalSet.from_spec(spec, max_images, progress=self.progress)
        return self.evalsets[key]


def reusable(stored: AnalysisResult, plan: AnalysisPlan, digest: str, data: dict[str, Any]) -> bool:
    """Whether ``stored`` answers ``plan`` for the model with weights ``digest`` evaluated on ``data`` (a data
    spec): the same weights, the same evaluation split (:func:`eval_data_key`) and an equal plan as applied to the
    stored model (no α sweep for a PE that α does not scale). Device, timings, the evaluation fingerprint and where
    a shift came from may differ; a stored plan that no longer reads (:meth:`AnalysisPlan.from_result`) is not
    reused."""
    from peanchor.analysis.plan import AnalysisPlan

    src = stored.source
    if src.get("model_digest") != digest or eval_data_key(src.get("data", {})) != eval_data_key(data):
        return False
    try:
        return AnalysisPlan.from_result(stored) == plan.for_model(stored.model.scalable)
    except PeanchorError:
        return False


def _stored_analysis(path: Path, log: Callable[[str], None], cell: Cell) -> AnalysisResult | None:
    if not (path / ANALYSIS_JSON).exists():
        return None
    try:
        return read_analysis(path)
    except SchemaError as e:  # an older or damaged analysis is made again, not an error
        log(f"{cell.name}: analysing again ({e})")
        return None


def _run_cell(
    options: ReproduceOptions, cell: Cell, evaluation: Evaluation, log: Callable[[str], None], status: dict[str, Any],
    stage: str = "cell",
) -> None:
    """Train (or reuse) and analyse (or reuse) one cell, or only one of the two (``stage`` ``"train"`` or
    ``"analyze"``), filling ``status`` as it goes (its ``stage`` says where an exception came from)."""
    if stage != "analyze":
        _train_cell(options, cell, log, status)
    if stage != "train":
        _analyse_cell(options, cell, evaluation, log, status)
    status["stage"] = "done" if stage != "train" else "trained"
    status["status"] = "ok"


def _train_cell(options: ReproduceOptions, cell: Cell, log: Callable[[str], None], status: dict[str, Any]) -> None:
    from peanchor.training.loop import train

    run_dir = options.cell_dir(cell)
    status["stage"] = "config"
    config = options.cell_config(cell)
    status["stage"] = "train"
    tracker = None
    if options.tensorboard:
        from peanchor.core.tracking import TrainingLog

        tracker = TrainingLog(run_dir)
    try:
        summary = train(config, run_dir, progress=options.progress, tracker=tracker)
    finally:
        if tracker is not None:
            tracker.close()
    if summary.get("status") == "stopped":
        raise PeanchorError(f"training of {run_dir} stopped before its last epoch")
    trained = summary.get("status") != "already_finished"
    status["trained"] = trained
    signum = interrupts.requested()
    if signum is not None:  # the signal came during the last epoch: the run finished; stop before analysing
        raise Interrupted(signum, f"{cell.name} is trained; its analysis runs when the command is rerun")
    if trained:
        log(f"{cell.name}: trained, val acc {summary.get('val_acc', math.nan):.4f} ({summary.get('seconds', 0):.0f} s)")


def _analyse_cell(
    options: ReproduceOptions, cell: Cell, evaluation: Evaluation, log: Callable[[str], None], status: dict[str, Any]
) -> None:
    from peanchor.analysis.evaluate import evaluate_model, measure_lenses
    from peanchor.checkpoint.files import load_model, model_digest
    from peanchor.results.records import write_analysis

    run_dir = options.cell_dir(cell)
    status["stage"] = "config"
    config = options.cell_config(cell)
    status["stage"] = "analyze"
    plan = options.plan_for(cell)
    digest = model_digest(run_dir)
    stored = _stored_analysis(run_dir / "analysis", log, cell)
    if stored is not None and reusable(stored, plan, digest, config.data.to_dict()):
        result = stored
        status["analyzed"] = bool(stored.lens_failures)
        if stored.lens_failures:  # a rerun retries only the lenses that failed
            failed = list(stored.lens_failures)
            evalset = evaluation.evalset(config.data, plan.max_images)
            records, notes = measure_lenses(load_model(run_dir), evalset, plan, failed, info=evalset.info,
                                            device=options.device, progress=None if options.progress else False)
            result.lenses.update(records)
            result.notes = [n for n in result.notes or () if n.split(":")[0] not in failed] + notes or None
            write_analysis(result, run_dir / "analysis")
            log(f"{cell.name}: measured again what failed before: {', '.join(failed)}"
                + _failures_said(result))  # fmt: skip
    else:
        evalset = evaluation.evalset(config.data, plan.max_images)
        model = load_model(run_dir)
        result = evaluate_model(model, evalset, plan, info=evalset.info, device=options.device,
                                progress=None if options.progress else False, cache=evaluation.cache)  # fmt: skip
        result.source = {
            "kind": "run_dir", "run_dir": str(run_dir), "model_digest": digest, "model_args": model.model_args,
            "condition": cell.condition.name, "seed": cell.seed, "data": config.data.to_dict(),
            "max_images": plan.max_images,
        }  # fmt: skip
        write_analysis(result, run_dir / "analysis")
        status["analyzed"] = True
        log(f"{cell.name}: analysed, {result.forward_passes} passes in {result.seconds:.1f} s "
            f"(clean {result.clean_acc:.3f}, ΔSSDC {result.delta_ssdc:.3f})" + _failures_said(result))  # fmt: skip
    if status["analyzed"]:
        for note in result.notes or ():
            log(f"{cell.name}: note: {note}")
    if result.lens_failures:
        status["failed_lenses"] = dict(result.lens_failures)
    if options.tensorboard:
        from peanchor.core.tracking import (
            TENSORBOARD_DIR,
            TensorBoardLog,
            has_events,
            log_analysis,
        )

        events = run_dir / "analysis" / TENSORBOARD_DIR
        if status["analyzed"] or not has_events(events):  # a reused analysis is logged once
            with TensorBoardLog(events) as tb:
                log_analysis(tb, result)


def _failures_said(result: AnalysisResult) -> str:
    """The failed lenses of an analysis, as the end of its log line ("" when none failed)."""
    failures = result.lens_failures
    if not failures:
        return ""
    said = "; ".join(f"{name}: {error}" for name, error in failures.items())
    return f"; {len(failures)} lens{'es' if len(failures) > 1 else ''} FAILED ({said}): rerun to retry {'them' if len(failures) > 1 else 'it'}"


def attempt(
    options: ReproduceOptions, cell: Cell, evaluation: Evaluation, log: Callable[[str], None], stage: str = "cell"
) -> dict[str, Any]:
    """Run one cell (or only its training or its analysis: ``stage`` ``"train"``, ``"analyze"``, as
    :mod:`peanchor.study.schedule` hands them out); a failure becomes ``status="failed"`` with the error instead of
    an exception."""
    status: dict[str, Any] = {"name": cell.name, "condition": cell.condition.name, "seed": cell.seed}
    try:
        _run_cell(options, cell, evaluation, log, status, stage)
    except Interrupted:  # a stop signal: the training checkpointed; the whole run stops, resumable
        raise
    except Exception as e:  # one failed cell must not stop the others
        if options.debug:
            raise
        status.update(status="failed", error=out_of_memory_message(options, cell, status.get("stage"), e)
                      or f"{type(e).__name__}: {e}")  # fmt: skip
    status["peak_rss_mb"] = peak_rss_mb()
    return status


def peak_rss_mb() -> dict[str, int]:
    """The peak resident memory so far, in MiB, of this process (in a worker: over the cells it ran) and of its
    largest finished child (a DataLoader worker); empty where the OS does not say."""
    try:
        import resource
    except ImportError:  # not on POSIX
        return {}
    scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
    mine, child = (resource.getrusage(who).ru_maxrss * scale // 2**20
                   for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))  # fmt: skip
    # ru_maxrss survives execve, so a spawned worker's starts at its parent's size when it was forked; Linux's VmHWM
    # (the high-water mark of this address space) is the worker's own.
    with contextlib.suppress(OSError, ValueError, StopIteration):
        status = Path("/proc/self/status").read_text().splitlines()
        mine = int(next(line for line in status if line.startswith("VmHWM:")).split()[1]) // 1024  # kB → MiB
    return {"process": int(mine), "largest_child": int(child)}


def out_of_memory_message(options: ReproduceOptions, cell: Cell, stage: str | None, error: BaseException) -> str | None:
    """One line for a cell that ran out of memory (``torch.OutOfMemoryError`` on a GPU, or the CPU allocator's
    failure): where, at which batch size, and what to set; None for any other error."""
    import torch

    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    gpu = isinstance(error, torch.OutOfMemoryError)
    if not gpu and not (isinstance(error, RuntimeError) and "can't allocate memory" in text):
        return None
    where = "GPU" if gpu else "CPU"
    if stage == "analyze":
        batch = options.plan_for(cell).batch_size
        what = (f"analysing at batch size {batch} (lower it with --set analysis.batch_size={max(1, batch // 2)}, or "
                "run fewer cells at once with --jobs)")  # fmt: skip
    else:
        batch = options.cell_config(cell).train.batch_size
        what = (f"training at batch size {batch} (lower it with --set train.batch_size={max(1, batch // 2)}, in "
                "another --out as it changes the run, or run fewer cells at once with --jobs)")  # fmt: skip
    return f"out of {where} memory {what}: {text[:200]}"
