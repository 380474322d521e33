"""Stop signals: SIGTERM/SIGINT end a run cleanly (a resumable checkpoint, no lock left, exit 128 + signal), and
rerunning the same command gives what an uninterrupted run gives.

The in-process parts (a signal recorded inside the training steps, raised elsewhere) are fast; the end-to-end
ones signal the installed `peanchor` console script (`train`, `reproduce --jobs 2`) and are marked slow. The same
through torchrun is in tests/test_training.py (DDP).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from peanchor.core import interrupts
from peanchor.core.interrupts import Interrupted

REPO = Path(__file__).resolve().parents[2]


def test_a_signal_is_recorded_inside_deferred_and_raised_outside():
    with interrupts.handling():
        with interrupts.deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)  # the handler runs at the next bytecode
            assert interrupts.requested() == signal.SIGTERM
            os.kill(os.getpid(), signal.SIGTERM)  # a repeated SIGTERM (Slurm, and reproduce forwarding) is only noted
        with pytest.raises(Interrupted, match="stopped by SIGTERM") as e:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
        assert e.value.exit_code == 143
        interrupts.reset()
        with pytest.raises(Interrupted) as e, interrupts.deferred():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.01)
            os.kill(os.getpid(), signal.SIGINT)  # a second Ctrl-C does not wait for the step
            time.sleep(1)
        assert e.value.exit_code == 130
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the previous handlers are back
    interrupts.reset()


def test_interrupted_survives_pickling_between_processes():
    import pickle

    e = pickle.loads(pickle.dumps(Interrupted(signal.SIGTERM, "saved at epoch 2 step 3/4")))
    assert str(e) == "stopped by SIGTERM: saved at epoch 2 step 3/4" and e.exit_code == 143


# ----------------------------------------------------------------------------------------------
# End to end


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    cache = tmp_path_factory.mktemp("cache")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PEANCHOR_CACHE": str(cache), "OMP_NUM_THREADS": "1"}


# The installed console script, as a user runs it (and stops it with Ctrl-C or a scheduler's SIGTERM).
PEANCHOR = shutil.which("peanchor")
needs_script = pytest.mark.skipif(
    PEANCHOR is None, reason="the `peanchor` console script is not installed (pip install -e .)"
)
LONG = ["data.train_size=4096", "data.val_size=100", "train.epochs=3", "train.batch_size=64", "train.log_every=8"]
TRAIN = [str(PEANCHOR), "train", "--preset", "smoke", "--pe", "ape", "--rpt", "--no-progress"]
TRAIN += [a for s in LONG for a in ("--set", s)]


def wait_for(path: Path, text: str, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        assert proc.poll() is None, f"the run ended before {text!r} appeared in {path}: {proc.communicate()}"
        assert time.monotonic() < deadline, f"{text!r} never appeared in {path}"
        time.sleep(0.02)


def stop(proc: subprocess.Popen, sig: int, hang_guard: float = 300) -> tuple[int, str]:
    """Send ``sig`` and wait for the process to end on its own; returns (exit code, stderr). ``hang_guard`` only
    keeps a process that never stops from hanging the suite (how soon it stops: benchmarks/bench_stop.py)."""
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=hang_guard)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
        pytest.fail(f"still running {hang_guard:.0f} s after {signal.Signals(sig).name}: {err[-3000:]}")
    return proc.returncode, err


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, env: dict[str, str]) -> Path:
    out = tmp_path_factory.mktemp("reference") / "run"
    done = subprocess.run([*TRAIN, "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.mark.slow
@needs_script
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_train_exits_on_its_own_and_its_rerun_is_identical(sig, tmp_path, env, reference):
    out = tmp_path / "run"
    proc = subprocess.Popen([*TRAIN, "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    wait_for(out / "train.log", "epoch 1/3", proc)  # now in epoch 2, mid-epoch
    code, err = stop(proc, sig)
    name = signal.Signals(sig).name
    assert code == 128 + sig, err
    assert err.strip().splitlines()[-1].startswith(f"peanchor: stopped by {name}: saved "), err
    assert not (out / ".lock").exists() and not (out / "model.safetensors").exists()
    from safetensors import safe_open

    with safe_open(str(out / "checkpoint" / "state.safetensors"), framework="pt") as f:
        meta = f.metadata()
    print(f"{name} landed at epoch {int(meta['epoch']) + 1}, step {meta['step_in_epoch']}")

    done = subprocess.run([*TRAIN, "--out", str(out)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming" in done.stderr
    assert (out / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes()
    rows = lambda run: [r.rsplit(",", 1)[0] for r in (run / "metrics.csv").read_text().splitlines()]
    assert rows(out) == rows(reference)
    log = (out / "train.log").read_text()
    assert "stopped" not in log or "resuming" in log
    assert log.count("epoch 3/3") == 1 and "finished: val acc" in log


@pytest.mark.slow
@needs_script
def test_sigterm_stops_reproduce_and_its_workers_and_the_rerun_finishes_the_same(tmp_path, env):
    grid = [str(PEANCHOR), "reproduce", "--preset", "smoke", "--conditions", "none,ape",
            "--jobs", "2", "--no-progress", "--set", "data.train_size=8192", "--set", "train.epochs=3"]  # fmt: skip
    reference = tmp_path / "reference"
    first = subprocess.Popen([*grid, "--out", str(reference)], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    out = tmp_path / "stopped"
    proc = subprocess.Popen([*grid, "--out", str(out)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    try:
        wait_for(out / "runs" / "ape-s0" / "train.log", "epoch 1/3", proc, timeout=600)
        code, err = stop(proc, signal.SIGTERM)
    finally:
        _, first_err = first.communicate(timeout=900)
    assert first.returncode == 0, first_err[-3000:]
    assert code == 143 and "peanchor: stopped by SIGTERM" in err, err[-3000:]
    assert not list(out.rglob(".lock")), "a lock was left behind"
    assert not (out / "results.json").exists()

    done = subprocess.run([*grid, "--out", str(out)], env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    for cell in ("none-s0", "ape-s0"):
        a, b = (d / "runs" / cell / "model.safetensors" for d in (out, reference))
        assert a.read_bytes() == b.read_bytes(), cell
    drop = ("wall_seconds", "compute_seconds", "seconds", "analysis_seconds", "timing", "finished_at", "run_dir")

    def results(d: Path) -> object:
        def strip(x: object) -> object:
            if isinstance(x, dict):
                return {k: strip(v) for k, v in x.items() if k not in drop}
            return [strip(v) for v in x] if isinstance(x, list) else x

        return strip(json.loads((d / "results.json").read_text()))

    assert results(out) == results(reference)
