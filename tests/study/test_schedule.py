"""``peanchor.study.schedule``: the order of reproduce's tasks, checked on fake cells without any timing. A simulated
run of workers with made-up task lengths shows that splitting a cell's training from its analysis leaves no worker
idle while work that it could do is waiting, and that every cell ends exactly once, failures included."""

from __future__ import annotations

import heapq

import pytest

from peanchor.settings.conditions import parse_conditions
from peanchor.study.cells import Cell, grid_cells
from peanchor.study.schedule import Task, TaskQueue, merge_statuses

CELLS = grid_cells(parse_conditions("none,ape,sincos,rope,rpt"), 1)


def _simulate(queue: TaskQueue, workers: int, length: dict[tuple[str, str], float],
              fail: frozenset[str] = frozenset()) -> tuple[float, list[tuple[float, int, Task]], list[str]]:  # fmt: skip
    """Run ``queue`` on ``workers`` simulated workers (task lengths by (cell, stage)); a training of a cell in
    ``fail`` fails. Returns the makespan, every (start, worker, task) and the cells in the order they finished."""
    clock, running, idle, started, finished = 0.0, [], list(range(workers)), [], []
    while True:
        while idle and (task := queue.next()) is not None:
            worker = idle.pop(0)
            started.append((clock, worker, task))
            heapq.heappush(running, (clock + length[task.cell.name, task.stage], worker, id(task), task))
        if not running:
            assert queue.exhausted
            return clock, started, finished
        clock, worker, _, task = heapq.heappop(running)
        ok = not (task.stage in ("train", "cell") and task.cell.name in fail)
        status = {"name": task.cell.name, "status": "ok" if ok else "failed", "trained": ok}
        done = queue.done(task, status)
        if done is not None:
            finished.append(done[0].name)
        idle.append(worker)


def _lengths(train: float, analyse: dict[str, float]) -> dict[tuple[str, str], float]:
    out = {}
    for c in CELLS:
        a = analyse.get(c.condition.name, 100.0)
        out |= {(c.name, "train"): train, (c.name, "analyze"): a, (c.name, "cell"): train + a}
    return out


def _alpha_cost(cell: Cell) -> float:
    return 1.0 if cell.condition.name in ("none", "rpt") else 6.0


def test_trainings_come_first_in_the_grids_order_then_the_costliest_ready_analysis():
    queue = TaskQueue(CELLS, split=True, analysis_cost=_alpha_cost)
    trainings = [queue.next() for _ in CELLS]
    assert [(t.cell.name, t.stage) for t in trainings] == [(c.name, "train") for c in CELLS]
    assert queue.next() is None and not queue.exhausted  # a worker waits: analyses will come
    for task in reversed(trainings):  # rpt's training ends first, then rope's, ...
        assert queue.done(task, {"status": "ok", "trained": True}) is None
    order = [queue.next().cell.condition.name for _ in CELLS]
    # the sweeping analyses first (ties in the grid's order), the cheap ones of none and rpt last
    assert order == ["ape", "sincos", "rope", "none", "rpt"]
    assert queue.next() is None and queue.exhausted  # the analyses run: nothing more to hand out, a free worker stops


def test_a_whole_cell_is_one_task_without_a_split():
    queue = TaskQueue(CELLS[:2], split=False)
    first, second = queue.next(), queue.next()
    assert (first.stage, second.stage) == ("cell", "cell") and queue.next() is None and queue.exhausted
    assert queue.done(first, {"status": "ok"}) == (CELLS[0], {"status": "ok"})


def test_splitting_keeps_both_workers_busy_where_whole_cells_leave_one_idle():
    # the cpu preset's shape: five cells of ~258 s of CPU on 2 workers, training about 60 % of a cell
    lengths = _lengths(150.0, {"none": 80.0, "rpt": 80.0, "ape": 120.0, "sincos": 120.0, "rope": 130.0})
    total = sum(v for (_, stage), v in lengths.items() if stage == "cell")
    whole, _, _ = _simulate(TaskQueue(CELLS, split=False), 2, lengths)
    split, started, finished = _simulate(TaskQueue(CELLS, split=True, analysis_cost=_alpha_cost), 2, lengths)
    assert whole == 150 + 80 + 150 + 120 + 150 + 80  # none, sincos, rpt one after the other on one worker
    # split: the two workers together idle less than one analysis (the shortest, rpt's, comes last)
    assert split < whole and 2 * split - total <= min(lengths[c.name, "analyze"] for c in CELLS)
    assert sorted(finished) == sorted(c.name for c in CELLS)
    for cell in CELLS:  # each analysis starts only after its own training ended
        train = next(t for t, _, task in started if task == Task(cell, "train"))
        analyse = next(t for t, _, task in started if task == Task(cell, "analyze"))
        assert analyse >= train + lengths[cell.name, "train"]


def test_a_failed_training_finishes_its_cell_and_queues_no_analysis():
    lengths = _lengths(10.0, {})
    total, started, finished = _simulate(TaskQueue(CELLS, split=True), 2, lengths, fail=frozenset({"rope-s0"}))
    assert sorted(finished) == sorted(c.name for c in CELLS)
    assert Task(CELLS[3], "analyze") not in [task for _, _, task in started]


def test_a_waiting_worker_is_released_when_the_last_training_fails():
    queue = TaskQueue(CELLS[:1], split=True)
    task = queue.next()
    assert queue.next() is None and not queue.exhausted
    assert queue.done(task, {"status": "failed", "error": "x"}) == (CELLS[0], {"status": "failed", "error": "x"})
    assert queue.exhausted


def test_a_cells_status_joins_its_training_and_its_analysis():
    queue = TaskQueue(CELLS[:1], split=True)
    train = queue.next()
    trained = {"status": "ok", "stage": "trained", "trained": True, "peak_rss_mb": {"process": 9}}
    assert queue.done(train, trained) is None
    analyse = queue.next()
    analysed = {"status": "ok", "stage": "done", "analyzed": True, "peak_rss_mb": {"process": 5}}
    cell, status = queue.done(analyse, analysed)
    assert cell == CELLS[0]
    assert status == {"status": "ok", "stage": "done", "trained": True, "analyzed": True, "peak_rss_mb": {"process": 9}}
    assert merge_statuses({"trained": False}, {"status": "failed"})["trained"] is False


def _analysis_numbers(path) -> dict:
    """An analysis.json without what depends on where and when it ran (its run directory, its timings)."""
    import json

    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in ("run_dir", "seconds", "timing")}
        return [strip(v) for v in value] if isinstance(value, list) else value

    return strip(json.loads(path.read_text()))


@pytest.mark.slow
def test_two_workers_with_split_tasks_give_the_numbers_of_one_process_bit_for_bit(tmp_path):
    from peanchor.cli import main

    grid = ["reproduce", "--preset", "smoke", "--conditions", "none,ape,rpt", "--no-progress"]
    assert main([*grid, "--jobs", "1", "--out", str(tmp_path / "one")]) == 0  # in this process, whole cells
    assert main([*grid, "--jobs", "2", "--out", str(tmp_path / "two")]) == 0  # two workers, trainings first
    for cell in ("none-s0", "ape-s0", "rpt-s0"):
        one, two = (tmp_path / d / "runs" / cell for d in ("one", "two"))
        assert (one / "model.safetensors").read_bytes() == (two / "model.safetensors").read_bytes()
        a, b = (_analysis_numbers(d / "analysis" / "analysis.json") for d in (one, two))
        assert a == b
