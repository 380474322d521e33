"""Where cells run: one after another in this process, or in a pool of spawned worker processes.

Small models on a few CPU cores train fastest as one process per core with one thread each. On a multi-GPU node
each worker takes one GPU (round-robin over ``CUDA_VISIBLE_DEVICES``, which the worker then narrows to its own).
Workers are spawned (never forked from a process that already runs torch threads), keep their evaluation sets and
corrupted copies between cells, stop cleanly on SIGTERM/SIGINT (a resumable checkpoint first), and die with their
parent. The device (``--device``) is passed through to training and analysis.

Imports: :mod:`peanchor.study.pipeline` (what one cell does), :mod:`peanchor.study.options`,
:mod:`peanchor.study.resources`, :mod:`peanchor.interrupts`.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from peanchor.errors import ConfigError
from peanchor.study.cells import Cell
from peanchor.study.options import ReproduceOptions
from peanchor.study.pipeline import Evaluation, attempt, stderr_log
from peanchor.presets import get_preset

__all__ = ["attempt_cells", "cells_on_gpus", "resolve_jobs"]


def cells_on_gpus(device: str | None) -> bool:
    """Whether cells run on CUDA with the device left to peanchor (``auto``/``cuda``), so that worker processes
    can be spread over the visible GPUs. An explicit ``cuda:N`` pins every cell to that GPU."""
    if device in (None, "auto"):
        from peanchor.study.resources import visible_gpus

        return bool(visible_gpus())
    return device == "cuda"


def resolve_jobs(jobs: str, preset: str, device: str | None) -> int:
    """``--jobs``: a number, or ``auto``: one process per usable CPU (the affinity mask, not the node's core
    count) for CPU runs, one per visible GPU (``CUDA_VISIBLE_DEVICES``) for GPU runs, 1 for an explicit ``cuda:N``
    or a preset whose cells take seconds.

    >>> resolve_jobs("3", "cpu", None)
    3
    >>> resolve_jobs("auto", "cpu", "cuda:1")
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
    from peanchor.study.resources import usable_cpus, visible_gpus

    if not get_preset(preset).parallel_cells or (device or "").startswith("cuda:"):
        return 1
    if cells_on_gpus(device):
        return max(1, len(visible_gpus()))
    return usable_cpus()


_WORKER_EVALUATION: Evaluation | None = None


def _worker_init(parent: int, slots: Any, gpus: list[str], threads: int) -> None:
    from peanchor import interrupts

    slot = slots.get()  # 0, 1, ...: this worker's place in the pool
    if gpus:  # before torch initialises CUDA: the worker then sees exactly one GPU, as cuda:0
        from peanchor.study.resources import gpu_for_worker

        os.environ["CUDA_VISIBLE_DEVICES"] = gpu_for_worker(slot, gpus)
    import torch

    # Small models on a few cores: one thread per process beats intra-op threads by a wide margin.
    torch.set_num_threads(threads)
    # SIGTERM/SIGINT (Slurm, Ctrl-C, or forwarded by the parent): checkpoint the cell's training, then stop.
    interrupts.install()
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
    status = attempt(options, cell, _WORKER_EVALUATION, stderr_log)
    gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
    if gpu is not None and options.device in (None, "auto", "cuda"):
        status["gpu"] = gpu
    return status


def _stop_workers(signum: int) -> None:
    """Pass a stop signal on to the pool's workers (under Slurm they get it themselves too; a plain ``kill`` of
    the parent reaches only the parent)."""
    import multiprocessing

    for child in multiprocessing.active_children():
        if child.pid is not None:
            try:
                os.kill(child.pid, signum)
            except ProcessLookupError:
                pass


def attempt_cells(
    options: ReproduceOptions, cells: Sequence[Cell], log: Callable[[str], None]
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Yield ``(cell, status)`` as cells finish: in order in this process, or from ``options.jobs``
    worker processes (spawned, progress bars off, one log line per cell). On GPUs, worker *k* takes the
    *k*-th visible GPU, round-robin. A stop signal is passed on to the workers, which checkpoint and stop;
    then :class:`~peanchor.interrupts.Interrupted` is raised here."""
    if options.jobs == 1 or len(cells) <= 1:
        evaluation = Evaluation(None if options.progress else False)
        for cell in cells:
            yield cell, attempt(options, cell, evaluation, log)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from peanchor import interrupts
    from peanchor.study.resources import usable_cpus, visible_gpus

    workers = min(options.jobs, len(cells))
    quiet = dataclasses.replace(options, progress=False, debug=False)
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that already runs torch threads
    gpus = visible_gpus() if cells_on_gpus(options.device) else []
    slots = ctx.Queue()
    for slot in range(workers):
        slots.put(slot)
    threads = max(1, usable_cpus() // workers) if gpus else 1
    where = f" on GPUs {', '.join(gpus[:workers])}" if gpus else ""
    log(f"running {len(cells)} cells in {workers} processes{where}")
    pool = ProcessPoolExecutor(
        workers, mp_context=ctx, initializer=_worker_init, initargs=(os.getpid(), slots, gpus, threads)
    )
    try:
        futures = {pool.submit(_worker_attempt, quiet, cell): cell for cell in cells}
        for future in as_completed(futures):
            yield futures[future], future.result()
    finally:  # also when the caller closes this generator early (it should, with contextlib.closing)
        signum = interrupts.requested()
        if signum is not None:
            log(f"stopping the workers on {signal.Signals(signum).name} (each checkpoints its cell first)")
            _stop_workers(signum)
        with interrupts.deferred():  # a repeated SIGTERM must not abandon the workers' checkpoints
            pool.shutdown(wait=True, cancel_futures=True)
