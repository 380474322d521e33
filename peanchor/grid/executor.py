"""Where cells run: one after another in this process, or in a pool of spawned single-threaded worker processes.

Small models on a few CPU cores train fastest as one process per core with one thread each. Workers are spawned
(never forked from a process that already runs torch threads), keep their evaluation sets and corrupted copies
between cells, and die with their parent. The device (``--device``) is passed through to training and analysis.

Imports: :mod:`peanchor.grid.pipeline` (what one cell does), :mod:`peanchor.grid.options`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from peanchor.errors import ConfigError
from peanchor.grid.cells import Cell
from peanchor.grid.options import ReproduceOptions
from peanchor.grid.pipeline import Evaluation, attempt, stderr_log
from peanchor.presets import get_preset

__all__ = ["attempt_cells", "resolve_jobs"]

def resolve_jobs(jobs: str, preset: str, device: str | None) -> int:
    """``--jobs``: a number, or ``auto``: one process per CPU core for CPU runs, one process on a GPU.

    >>> resolve_jobs("3", "cpu", None)
    3
    >>> resolve_jobs("auto", "cpu", "cuda")
    1
    """
    if jobs != "auto":
        try:
            n = int(jobs)
        except ValueError:
            raise ConfigError(f"--jobs {jobs!r}: expected a number or auto") from None
        if n < 1:
            raise ConfigError(f"--jobs {jobs}: expected >= 1")
        return n
    if not get_preset(preset).parallel_cells or (device or "auto").startswith("cuda"):
        return 1
    if device in (None, "auto"):
        import torch

        if torch.cuda.is_available():
            return 1
    return max(1, os.cpu_count() or 1)


_WORKER_EVALUATION: Evaluation | None = None


def _worker_init(parent: int) -> None:
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
        _WORKER_EVALUATION = Evaluation(False)
    return attempt(options, cell, _WORKER_EVALUATION, stderr_log)


def attempt_cells(
    options: ReproduceOptions, cells: Sequence[Cell], log: Callable[[str], None]
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Yield ``(cell, status)`` as cells finish: in order in this process, or from ``options.jobs``
    worker processes (spawned, one thread each; progress bars off, one log line per cell)."""
    if options.jobs == 1 or len(cells) <= 1:
        evaluation = Evaluation(None if options.progress else False)
        for cell in cells:
            yield cell, attempt(options, cell, evaluation, log)
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
