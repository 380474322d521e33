"""``peanchor reproduce`` survives its cells: a worker killed with SIGKILL (the OOM killer's signal) is one line and the
other cells go on; a rerun resumes the dead cell to exactly the numbers of an uninterrupted run. A cell out of
memory is one line with its batch size and what to set."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from peanchor.cli import main
from peanchor.study.executor import death_message

from tests.helpers.paths import ROOT as REPO



@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "PYTHONPATH": path, "PEANCHOR_CACHE": str(cache), "OMP_NUM_THREADS": "1"}


def _refuse(constant: str) -> float:
    raise AssertionError(f"not strict JSON: {constant}")


def _grid(conditions: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", "peanchor", "reproduce", "--preset", "smoke", "--conditions", conditions,
            "--no-progress", "--set", "train.epochs=12", *extra]  # fmt: skip


def _kill_when_checkpointed(proc: subprocess.Popen, run: Path) -> int:
    """SIGKILL the process training ``run`` (the pid in its lock file) once its first checkpoint is written."""
    state, lock = run / "checkpoint" / "state.safetensors", run / ".lock"
    while not (state.exists() and lock.exists()):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        time.sleep(0.02)
    pid = int(lock.read_text().split()[0])
    assert pid != proc.pid  # a worker, not reproduce itself
    os.kill(pid, signal.SIGKILL)
    return pid


def _measures(path: Path, name: str) -> dict:
    doc = json.loads(path.read_text(), parse_constant=_refuse)
    model = next(m for m in doc["models"] if m["name"] == name)
    drop = ("run_dir", "analysis_seconds", "train")
    model.get("source", {}).pop("run_dir", None)  # the model's analysis record names its run directory too
    return {**{k: v for k, v in model.items() if k not in drop}, "val_acc": model["train"]["val_acc"]}


@pytest.mark.slow
@pytest.mark.parametrize("shard", [False, True], ids=["whole", "shard"])
def test_a_cell_killed_with_sigkill_is_one_line_and_the_others_go_on(tmp_path, env, shard):
    # none-s0 trains far longer than ape-s0, so the kill lands while none-s0 is still training.
    conditions = "none,sincos,ape" if shard else "none,ape"  # shard 1/2 of none,sincos,ape: none-s0 and ape-s0
    extra = ["--shard", "1/2"] if shard else []
    cmd = _grid(conditions, "--jobs", "2", "--set", "none:train.epochs=80", *extra, "--out", str(tmp_path / "g"))
    out = tmp_path / "g"
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    pid = _kill_when_checkpointed(proc, out / "runs" / "ape-s0")
    stdout, stderr = proc.communicate(timeout=600)

    assert proc.returncode == 1, stderr[-3000:]
    assert "Traceback" not in stderr and "leaked semaphore" not in stderr, stderr[-3000:]
    lines = stderr.splitlines()
    dead = [line for line in lines if "ape-s0" in line and "FAILED" in line]
    assert dead == [f"peanchor: [1/2] ape-s0: FAILED ({death_message(pid, -signal.SIGKILL)})"], lines
    assert "out of memory" in dead[0] and "rerun the same command to resume" in dead[0]
    trained = next(i for i, line in enumerate(lines) if "none-s0: trained" in line)
    assert lines.index(dead[0]) < trained, "the death was noticed only after the other cell finished"
    assert "resuming" not in (out / "runs" / "none-s0" / "train.log").read_text()  # never restarted
    assert (out / "runs" / "none-s0" / "analysis" / "analysis.json").exists()
    status = json.loads((out / "status" / "ape-s0.json").read_text(), parse_constant=_refuse)
    assert status["status"] == "failed" and status["stage"] == "train" and "SIGKILL" in status["error"]
    if shard:
        assert "shard 1/2 done (2 cells, 1 failed)" in stdout and not (out / "results.json").exists()
        return
    results = json.loads((out / "results.json").read_text(), parse_constant=_refuse)
    assert [m["name"] for m in results["models"]] == ["none-s0"]
    assert [f["name"] for f in results["failed"]] == ["ape-s0"] and (out / "report.md").exists()

    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming" in (out / "runs" / "ape-s0" / "train.log").read_text()
    reference = tmp_path / "reference"  # the same cell, never interrupted, in this process's way (--jobs 1)
    fresh = subprocess.run(_grid("ape", "--jobs", "1", "--out", str(reference)), env=env, capture_output=True,
                           text=True, timeout=600)  # fmt: skip
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    a, b = (d / "runs" / "ape-s0" / "model.safetensors" for d in (out, reference))
    assert a.read_bytes() == b.read_bytes()
    assert _measures(out / "results.json", "ape-s0") == _measures(reference / "results.json", "ape-s0")


@pytest.mark.parametrize(("stage", "target", "expected"), [
    ("train", "peanchor.training.loop.train",
     "out of GPU memory training at batch size 64 (lower it with --set train.batch_size=32"),
    ("analyze", "peanchor.analysis.evaluate.evaluate_model",
     "out of GPU memory analysing at batch size 25 (lower it with --set analysis.batch_size=12"),
])  # fmt: skip
def test_a_cell_out_of_gpu_memory_is_one_line_with_its_batch_size(tmp_path, capsys, monkeypatch, stage, target,
                                                                   expected):  # fmt: skip
    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total)")

    monkeypatch.setattr(target, out_of_memory)  # for "analyze" the cell trains for real first
    out = tmp_path / "grid"
    code = main(["reproduce", "--preset", "smoke", "--conditions", "none", "--no-progress", "--out", str(out)])
    assert code == 1
    err = capsys.readouterr().err
    failed = [line for line in err.splitlines() if "FAILED" in line]
    assert len(failed) == 1 and expected in failed[0] and "Tried to allocate 2.00 GiB" in failed[0], err
    results = json.loads((out / "results.json").read_text(), parse_constant=_refuse)
    assert results["failed"][0]["stage"] == stage and expected in results["failed"][0]["error"]


@pytest.mark.slow
def test_closing_the_cells_early_stops_the_workers_and_starts_no_other_cell(tmp_path):
    import contextlib
    import multiprocessing

    from peanchor.settings.conditions import parse_conditions
    from peanchor.study import ReproduceOptions
    from peanchor.study.executor import attempt_cells

    options = ReproduceOptions(preset="smoke", out=tmp_path, conditions=parse_conditions("none,ape,sincos"), seeds=1,
                               jobs=2, progress=False)  # fmt: skip
    with contextlib.closing(attempt_cells(options, options.cells(), print)) as outcomes:
        first, status = next(outcomes)
    assert status["status"] == "ok"
    assert not multiprocessing.active_children()  # every worker reaped
    # With two workers every training is handed out first (peanchor.study.schedule), then the analyses: when the
    # first cell is done, the other worker runs at most one more task and nothing is handed out after the yield.
    analysed = {p.parent.parent.name for p in (tmp_path / "runs").glob("*/analysis/analysis.json")}
    assert first.name in analysed and len(analysed) <= 2  # the third analysis was never handed out
