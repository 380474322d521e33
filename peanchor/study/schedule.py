"""The order in which ``reproduce``'s worker processes take their work: a cell's training and its analysis are two
tasks, so that no core idles while one cell is still being analysed.

Why not lend the idle core to the last cell instead: torch's CPU kernels do not give the same bits at another
thread count (the weight gradients of linear layers, LayerNorm and the patch convolution are reductions over the
batch that split by thread; forward passes, softmax, attention and AdamW agree bit for bit), so a cell trained
with two threads after one would have other weights, and the position probe's ridge fit moves in its seventh
digit. Splitting the work keeps every number, whatever ran where.

The rule (:class:`TaskQueue`): a free worker takes the next training if one is pending (in the grid's order,
seed-major); else the ready analysis that costs most (one with an α sweep before one without: a model trained
with RPT and a PE that α does not scale are analysed without the sweep); else it waits until a training it could
follow ends. With one worker, or in this process, a cell is one task, trained and analysed in one go.

Imports: :mod:`peanchor.study.cells`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from peanchor.study.cells import Cell

__all__ = ["Stage", "Task", "TaskQueue", "merge_statuses"]

Stage = Literal["cell", "train", "analyze"]  # "cell": both, in one go


@dataclass(frozen=True)
class Task:
    """What a worker is handed: one cell, and which part of it to run."""

    cell: Cell
    stage: Stage = "cell"


def merge_statuses(trained: dict[str, Any], analysed: dict[str, Any]) -> dict[str, Any]:
    """One cell's status from its training's and its analysis's: the analysis's fields, with whether the cell was
    trained, and the larger of the two peaks of memory (they may come from two processes).

    >>> merge_statuses({"trained": True, "status": "ok", "peak_rss_mb": {"process": 300}},
    ...                {"analyzed": True, "status": "ok", "peak_rss_mb": {"process": 200}})
    {'trained': True, 'status': 'ok', 'peak_rss_mb': {'process': 300}, 'analyzed': True}
    """
    merged = {**trained, **analysed}
    merged["trained"] = bool(trained.get("trained"))
    peaks = [s["peak_rss_mb"] for s in (trained, analysed) if isinstance(s.get("peak_rss_mb"), dict)]
    if peaks:
        keys = dict.fromkeys(k for p in peaks for k in p)
        merged["peak_rss_mb"] = {key: max(p.get(key, 0) for p in peaks) for key in keys}
    return merged


class TaskQueue:
    """The tasks of ``cells`` (split into training and analysis when ``split``), handed out by :meth:`next` and
    reported back by :meth:`done`, which says when a cell is finished. ``analysis_cost`` ranks ready analyses
    (higher first; ties in the grid's order).

    >>> from peanchor.settings.conditions import parse_conditions
    >>> from peanchor.study.cells import grid_cells
    >>> queue = TaskQueue(grid_cells(parse_conditions("none,ape"), 1), split=True)
    >>> [(t.cell.name, t.stage) for t in (queue.next(), queue.next())], queue.next()
    ([('none-s0', 'train'), ('ape-s0', 'train')], None)
    """

    def __init__(self, cells: Sequence[Cell], *, split: bool, analysis_cost: Callable[[Cell], float] | None = None):
        self.split = split
        self._cost = analysis_cost or (lambda cell: 0.0)
        self._pending: list[Task] = [Task(c, "train" if split else "cell") for c in cells]
        self._ready: list[Task] = []  # analyses whose training is done
        self._trained: dict[str, dict[str, Any]] = {}  # cell name → its training's status, until it is analysed
        self._trainings_running = 0  # handed out and not yet done: each may still add an analysis

    def next(self) -> Task | None:
        """The task a free worker takes now; None when none is ready (see :attr:`exhausted`: none may ever be)."""
        if self._pending:
            task = self._pending.pop(0)
        elif self._ready:
            task = max(self._ready, key=lambda t: (self._cost(t.cell), -t.cell.index))
            self._ready.remove(task)
        else:
            return None
        self._trainings_running += task.stage == "train"
        return task

    @property
    def exhausted(self) -> bool:
        """Nothing is left to hand out, now or later: a waiting worker may stop."""
        return not self._pending and not self._ready and not self._trainings_running

    def done(self, task: Task, status: dict[str, Any]) -> tuple[Cell, dict[str, Any]] | None:
        """Report ``task`` finished with ``status``; returns the cell and its status when the cell is finished (a
        whole cell, an analysis, or a training that failed), None when its analysis is still to come."""
        if task.stage == "train":
            self._trainings_running -= 1
            if status.get("status") == "ok":
                self._trained[task.cell.name] = status
                self._ready.append(Task(task.cell, "analyze"))
                return None
        if task.stage == "analyze":
            status = merge_statuses(self._trained.pop(task.cell.name, {}), status)
        return task.cell, status
