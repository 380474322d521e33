"""Where cells run: in supervised worker processes, one cell at a time each (or, for cells of seconds, in this process).

Small models on a few CPU cores train fastest as one process per core with one thread each. On a multi-GPU node
each worker takes one GPU (round-robin over ``CUDA_VISIBLE_DEVICES``, which the worker narrows to its own before
torch initialises CUDA). Workers are spawned (never forked from a process that already runs torch threads), keep
their evaluation sets and corrupted copies between cells, stop cleanly on SIGTERM/SIGINT (a resumable checkpoint
first, then one line), and die with their parent.

Every worker is supervised on its own (a pipe per worker, no shared queue and no semaphore): the parent waits on
the pipes and the processes' sentinels at once, so a worker that dies (the OOM killer's SIGKILL, a segfault in
native code, a CUDA fault) is noticed at once. Its cell becomes one failed status naming the signal or exit code,
the likely cause and the remedy (:func:`death_message`); the other workers go on with their cells, and a fresh
worker takes the dead one's place for the work still to do.

With more than one worker a cell's training and its analysis are two tasks (:mod:`peanchor.study.schedule`):
trainings first, then analyses, so that the last cell's analysis does not leave the other cores idle. Every
worker keeps one thread, whatever is left to run: torch's CPU kernels do not give the same bits at another thread
count, and the numbers must not depend on the scheduling.

Imports: :mod:`peanchor.study.pipeline` (what one cell does), :mod:`peanchor.study.options`,
:mod:`peanchor.study.resources`, :mod:`peanchor.study.cells`, :mod:`peanchor.study.schedule`,
:mod:`peanchor.core.interrupts`, :mod:`peanchor.presets.catalog`
(whether a preset's cells run in parallel), :mod:`peanchor.training` (the run directory's file names),
:mod:`peanchor.pe` (whether α scales a cell's PE: the cost of its analysis),
:mod:`peanchor.core.registry` (the plug-ins a worker loads).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from peanchor.core import interrupts
from peanchor.core.errors import ConfigError
from peanchor.core.interrupts import Interrupted
from peanchor.presets.catalog import get_preset
from peanchor.core.registry import plugins_in_environment
from peanchor.study.cells import Cell
from peanchor.study.options import ReproduceOptions
from peanchor.study.pipeline import Evaluation, attempt, stderr_log
from peanchor.study.schedule import Task, TaskQueue

__all__ = ["attempt_cells", "cells_in_workers", "cells_on_gpus", "death_message", "resolve_jobs"]


_CAUSES = {
    signal.SIGKILL: "most likely out of memory (the kernel's OOM killer; `dmesg` says), or a kill -9",
    signal.SIGSEGV: "a crash in native code (torch, a data or image library)",
    signal.SIGBUS: "a crash in native code, or /dev/shm too small for the DataLoader workers",
    signal.SIGABRT: "an abort in native code (e.g. a CUDA error)",
}


def death_message(pid: int | None, exitcode: int | None) -> str:
    """One line for a worker process that died while running a cell: the signal or exit code, the likely cause
    and the remedy.

    >>> death_message(42, -9).split(": ")[0]
    'its process 42 was killed by SIGKILL'
    >>> death_message(42, 3)
    'its process 42 exited with code 3; rerun the same command to resume it from its last checkpoint'
    """
    if exitcode is not None and exitcode < 0:
        try:
            sig = signal.Signals(-exitcode)
            what, cause = f"was killed by {sig.name}", _CAUSES.get(sig)
        except ValueError:
            what, cause = f"was killed by signal {-exitcode}", None
    elif exitcode is not None and exitcode > 128 and exitcode - 128 in (signal.SIGTERM, signal.SIGINT):
        what, cause = f"was stopped by {signal.Signals(exitcode - 128).name}", "its training checkpointed first"
    else:
        what, cause = f"exited with code {exitcode}", None
    return (f"its process {pid} {what}" + (f": {cause}" if cause else "")
            + "; rerun the same command to resume it from its last checkpoint")  # fmt: skip


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


# ----------------------------------------------------------------------------------------------
# The worker side


def _worker_init(parent: int, slot: int, gpus: list[str], threads: int, cpus: int) -> None:
    from peanchor.training.loaders import CELL_CPUS_ENV

    os.environ[CELL_CPUS_ENV] = str(cpus)  # caps the cell's DataLoader workers
    import threading

    from tqdm import tqdm

    # tqdm's default lock is a multiprocessing semaphore; a worker killed with it registered leaves the parent's
    # resource tracker a "leaked semaphore" to warn about. One process writes its own lines: a thread lock will do.
    tqdm.set_lock(threading.RLock())
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


def _worker_main(conn: Any, options: ReproduceOptions, parent: int, slot: int, gpus: list[str], threads: int,
                 cpus: int) -> None:  # fmt: skip
    """A worker: tasks (a cell, or its training or its analysis) arrive on ``conn`` (None: stop), statuses go
    back on it. A stop signal ends it with one line and the exit code 128 + signal."""
    _worker_init(parent, slot, gpus, threads, cpus)
    evaluation: Evaluation | None = None  # evaluation sets and corrupted copies, shared by this worker's cells
    task: Task | None = None
    try:
        while (task := conn.recv()) is not None:
            if evaluation is None:
                evaluation = Evaluation(False)
            status = attempt(options, task.cell, evaluation, stderr_log, task.stage)
            gpu = os.environ.get("CUDA_VISIBLE_DEVICES")
            if gpu is not None and options.device in (None, "auto", "cuda"):
                status["gpu"] = gpu
            conn.send(status)
    except Interrupted as e:
        if task is not None:
            stderr_log(f"{task.cell.name}: {e}")
        sys.exit(e.exit_code)
    except (EOFError, BrokenPipeError):  # the parent is gone
        sys.exit(1)
    finally:
        conn.close()


# ----------------------------------------------------------------------------------------------
# The parent side


@dataclasses.dataclass
class _Worker:
    slot: int
    process: Any  # multiprocessing.Process
    conn: Any  # the parent's end of the worker's pipe
    task: Task | None = None  # what it runs; None: waiting for a task, or told to stop
    stopped: bool = False  # told to stop (sent None)


def _dead_status(options: ReproduceOptions, cell: Cell, worker: _Worker) -> dict[str, Any]:
    from peanchor.training.run_dir import SUMMARY_FILE

    trained = (options.cell_dir(cell) / SUMMARY_FILE).exists()
    return {"name": cell.name, "condition": cell.condition.name, "seed": cell.seed, "status": "failed",
            "stage": "analyze" if trained else "train",
            "error": death_message(worker.process.pid, worker.process.exitcode)}  # fmt: skip


def analysis_cost(options: ReproduceOptions) -> Callable[[Cell], float]:
    """How costly a cell's analysis is, to rank the ready ones: the α points it measures (none for a model
    trained with RPT, or whose PE α does not scale), each of which costs about as much as the clean pass."""
    from peanchor.pe import PE_REGISTRY

    def cost(cell: Cell) -> float:
        scalable = PE_REGISTRY.lookup(cell.condition.pe).scalable  # as the model's pe_scalable says
        return float(1 + len(options.plan_for(cell).for_model(scalable).alphas))

    return cost


class _Supervisor:
    """Worker processes, one per slot, each handed the next task (:class:`TaskQueue`) when it is free; with more
    than one worker a cell's training and analysis are two tasks, so that the last cells' work spreads over every
    worker."""

    def __init__(self, options: ReproduceOptions, cells: Sequence[Cell], workers: int, gpus: list[str]) -> None:
        import multiprocessing

        from peanchor.study.resources import usable_cpus

        self.ctx = multiprocessing.get_context("spawn")  # no fork of a process that already runs torch threads
        # One worker keeps the progress bars (nothing interleaves with them); several print one line per cell.
        self.options = options.with_runtime(progress=options.progress and workers == 1, debug=False)
        self.queue = TaskQueue(cells, split=workers > 1, analysis_cost=analysis_cost(options))
        self.gpus = gpus
        self.cpus = max(1, usable_cpus() // workers)
        self.threads = self.cpus  # one per CPU the worker was given (1 when there is a worker per CPU)
        self.workers: dict[int, _Worker] = {}
        for slot in range(workers):
            self._start(slot)

    def _start(self, slot: int) -> None:
        parent_end, child_end = self.ctx.Pipe()
        process = self.ctx.Process(
            target=_worker_main, name=f"peanchor-cell-worker-{slot}",
            args=(child_end, self.options, os.getpid(), slot, self.gpus, self.threads, self.cpus),
        )  # fmt: skip
        with plugins_in_environment():  # the worker imports this process's --plugin modules before its arguments
            process.start()
        child_end.close()  # the worker's death then reads as EOF here
        worker = _Worker(slot, process, parent_end)
        self.workers[slot] = worker
        self._hand_out(worker)

    def _hand_out(self, worker: _Worker) -> None:
        """Send ``worker`` its next task, or the stop when nothing is left; leave it waiting when its next task
        can only come from a training still running elsewhere."""
        worker.task = self.queue.next()
        if worker.task is None and not self.queue.exhausted:
            return
        worker.stopped = worker.task is None
        try:
            worker.conn.send(worker.task)  # None: nothing more to do, the worker exits
        except (BrokenPipeError, OSError):
            pass  # it died meanwhile: its sentinel says so next

    def _wake_waiting(self) -> None:
        """After a task ended: hand what became ready (or the stop) to the workers that wait."""
        for worker in list(self.workers.values()):
            if worker.task is None and not worker.stopped:
                self._hand_out(worker)

    def run(self) -> Iterator[tuple[Cell, dict[str, Any]]]:
        from multiprocessing.connection import wait

        while self.workers:
            waitables = [w.conn for w in self.workers.values()] + [w.process.sentinel for w in self.workers.values()]
            ready = set(wait(waitables))
            for worker in list(self.workers.values()):
                if worker.conn in ready or worker.process.sentinel in ready:
                    yield from self._collect(worker)

    def _collect(self, worker: _Worker) -> Iterator[tuple[Cell, dict[str, Any]]]:
        """What ``worker`` has to say: a finished task's status (and, when that finishes a cell, the cell's), or
        its death."""
        try:
            if worker.conn.poll():
                status = worker.conn.recv()
                task, worker.task = worker.task, None
                assert task is not None
                finished = self.queue.done(task, status)
                if finished is not None:
                    yield finished
                # after the yield: a caller that stops here starts nothing more
                self._hand_out(worker)
                self._wake_waiting()
                return
        except (EOFError, OSError):
            pass  # the pipe is closed: the worker is gone
        if worker.process.is_alive():
            return
        worker.process.join()
        worker.conn.close()
        del self.workers[worker.slot]
        task, worker.task = worker.task, None
        if task is not None:  # it died running a task
            finished = self.queue.done(task, _dead_status(self.options, task.cell, worker))
            assert finished is not None  # a dead task is a failed one: its cell is finished
            yield finished
            if not self.queue.exhausted:  # a fresh worker for the work still to do; the others go on undisturbed
                self._start(worker.slot)
            self._wake_waiting()

    def close(self, log: Callable[[str], None]) -> None:
        """Stop and reap every worker: pass a stop signal on (each checkpoints its cell first); on an early close
        without one, stop the busy workers with SIGTERM."""
        signum = interrupts.requested()
        alive = [w for w in self.workers.values() if w.process.is_alive()]
        if alive and signum is not None:
            log(f"stopping the workers on {signal.Signals(signum).name} (each checkpoints its cell first)")
        with interrupts.deferred():  # a repeated SIGTERM must not abandon the workers' checkpoints
            for worker in alive:
                if worker.task is not None or signum is not None:
                    _signal(worker.process.pid, signum or signal.SIGTERM)
                else:  # idle: told to stop (again, if it was told already)
                    with contextlib.suppress(OSError):
                        worker.conn.send(None)
            for worker in self.workers.values():
                # Closed before the join: a worker still busy after its signal, or waiting for a task, then reads
                # EOF (or a broken pipe for its status) and exits instead of waiting for the parent forever.
                worker.conn.close()
            for worker in self.workers.values():
                worker.process.join()
        self.workers.clear()


def _signal(pid: int | None, signum: int) -> None:
    if pid is not None:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass


def cells_in_workers(options: ReproduceOptions, cells: Sequence[Cell]) -> bool:
    """Whether cells run in supervised worker processes: always, but for ``--jobs 1`` with a preset whose cells take
    seconds (the smoke preset: a worker's start would dominate). So ``--jobs 1`` runs a heavy cell in a worker of
    its own too, and a cell killed by the OOM killer is one failed line while the run writes the others' results.

    >>> from peanchor.study.cells import grid_cells
    >>> from peanchor.settings.conditions import parse_conditions
    >>> cells = grid_cells(parse_conditions("none,ape"), 1)
    >>> [cells_in_workers(ReproduceOptions(preset=p, jobs=j), cells) for p, j in (("smoke", 1), ("smoke", 2), ("cpu", 1))]
    [False, True, True]
    """
    return bool(cells) and (options.jobs > 1 or get_preset(options.preset).parallel_cells)


def attempt_cells(
    options: ReproduceOptions, cells: Sequence[Cell], log: Callable[[str], None]
) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """Yield ``(cell, status)`` as cells finish: from ``options.jobs`` supervised worker processes (spawned; with
    more than one, progress bars off and one log line per cell), or, with ``--jobs 1`` and a preset whose cells take
    seconds, in order in this process (:func:`cells_in_workers`). On GPUs, worker *k* takes the *k*-th
    visible GPU, round-robin. A worker that dies yields its cell as failed (:func:`death_message`). A stop signal
    is passed on to the workers, which checkpoint and stop; then :class:`~peanchor.core.interrupts.Interrupted` is
    raised here."""
    if not cells_in_workers(options, cells):
        evaluation = Evaluation(None if options.progress else False)
        for cell in cells:
            yield cell, attempt(options, cell, evaluation, log)
        return
    from peanchor.study.resources import visible_gpus

    gpus = visible_gpus() if cells_on_gpus(options.device) else []
    supervisor = _Supervisor(options, cells, min(options.jobs, len(cells)), gpus)
    try:
        yield from supervisor.run()
    finally:  # also when the caller closes this generator early (it should, with contextlib.closing)
        supervisor.close(log)
