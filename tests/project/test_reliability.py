"""Reliability: kill -9 at any moment, full disks, unwritable outputs, concurrent runs, determinism.

* **kill -9**: ``peanchor train --preset smoke`` and ``peanchor reproduce --preset smoke`` run in a
  subprocess and are SIGKILLed again and again (seeded random delays, right after a file appears,
  and in the middle of atomic writes: a ``sitecustomize`` on ``PYTHONPATH`` makes ``os.replace``
  sleep in the child, so the kill lands between "temporary file written" and "renamed"). After
  every kill no file in the run directory is torn (every JSON/YAML/CSV parses, every safetensors
  loads, every PNG/PDF is whole, every temporary file is hidden). Garbage temporary files are
  planted before the final rerun; the finished result must equal an uninterrupted run's: the
  weights byte for byte, ``results.json`` minus wall times and paths.
* **disk full / unwritable**: ``fileio`` with ``os.replace``/the write/``mkstemp`` failing
  (ENOSPC, EACCES; the tests run as root, where ``chmod 500`` does not stop writes, so the failures
  are injected) gives a one-line :class:`PeanchorError` and leaves the previous file; a training
  run whose checkpoint write fails stops with a clear error and its previous checkpoint loads.
* **concurrency**: a second process on the same run directory is refused through the lock; a
  lock left by a dead process is taken over.
* **determinism**: the same seed gives the same ``results.json`` on CPU (two reproduce runs, run
  side by side, into different directories).

Subprocesses run with one intra-op thread: tiny models are fastest so and a busy machine then has
no oversubscription; every run that is compared uses the same setting.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from safetensors import safe_open

from peanchor.core import fileio
from peanchor.cli import main
from peanchor.core.errors import PeanchorError, RunDirError

SMOKE = ["--preset", "smoke", "--no-progress"]
SLOW_REPLACE_S = "0.25"
TIMING_KEYS = frozenset({"wall_seconds", "compute_seconds", "seconds", "analysis_seconds", "timing", "finished_at"})

# ----------------------------------------------------------------------------------------------
# Environment for subprocesses

SITECUSTOMIZE = textwrap.dedent(
    """
    # Test hook (tests/project/test_reliability.py): with PEANCHOR_TEST_SLOW_REPLACE=<seconds>, every os.replace
    # sleeps first, so a SIGKILL can land between "temporary file written" and "renamed into place".
    import os as _os

    _delay = _os.environ.get("PEANCHOR_TEST_SLOW_REPLACE")
    if _delay:
        import time as _time

        _real_replace = _os.replace

        def _slow_replace(src, dst, *args, **kwargs):
            _time.sleep(float(_delay))
            return _real_replace(src, dst, *args, **kwargs)

        _os.replace = _slow_replace
    """
)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> dict[str, str]:
    hook = tmp_path_factory.mktemp("sitecustomize")
    (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join(p for p in (str(hook), os.environ.get("PYTHONPATH", "")) if p)
    return {
        **os.environ,
        "PYTHONPATH": path,
        "PEANCHOR_CACHE": str(cache),
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
    }


pytestmark = pytest.mark.usefixtures("in_process")


def peanchor_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "peanchor", *args]


def start(cmd: list[str], env: dict[str, str]) -> subprocess.Popen:
    """Start ``cmd`` in the background (stderr kept for the failure message)."""
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 600) -> None:
    """Wait for a :func:`start`-ed process; it must succeed."""
    _, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, f"{' '.join(proc.args[2:])} failed ({proc.returncode}):\n{err[-3000:]}"


# ----------------------------------------------------------------------------------------------
# Killing at chosen moments


@dataclass
class Kill:
    """When to SIGKILL an attempt.

    ``delay``: after ``seconds``. ``appears``/``changes``: as soon as ``where`` (a file under the run
    directory) exists / differs from its state at launch, then ``seconds`` of jitter. ``temp``: as
    soon as a temporary file ``.<prefix>.*`` exists in directory ``where`` (mid atomic write), then
    ``seconds`` of jitter. ``slow`` makes every ``os.replace`` of the child sleep first.
    """

    kind: str
    where: str = ""
    prefix: str = ""
    seconds: float = 0.0
    slow: bool = False

    def describe(self) -> str:
        what = {
            "delay": f"after {self.seconds:.2f} s",
            "appears": f"when {self.where} appears",
            "changes": f"when {self.where} changes",
            "temp": f"mid-write of {self.where}/{self.prefix}",
        }
        return what[self.kind] + (f" (+{self.seconds * 1e3:.0f} ms)" if self.kind != "delay" and self.seconds else "")


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _temp_present(directory: Path, prefix: str) -> bool:
    try:
        with os.scandir(directory) as it:
            return any(e.name.startswith(f".{prefix}") and ".tmp" in e.name for e in it)
    except FileNotFoundError:
        return False


def attempt(
    cmd: list[str], out: Path, env: dict[str, str], kill: Kill | None, timeout: float = 600
) -> tuple[str, int, str]:
    """Run ``cmd`` once; ``("killed", -9, stderr)`` if ``kill`` fired, else ``("exited", returncode, stderr)``."""
    child_env = dict(env)
    if kill is not None and kill.slow:
        child_env["PEANCHOR_TEST_SLOW_REPLACE"] = SLOW_REPLACE_S
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, env=child_env, stdout=subprocess.DEVNULL, stderr=err)
        start = time.monotonic()
        baseline = _stat(out / kill.where) if kill is not None and kill.kind == "changes" else None
        fired = False
        while proc.poll() is None:
            elapsed = time.monotonic() - start
            if elapsed > timeout:
                proc.kill()
                proc.wait()
                pytest.fail(f"{' '.join(cmd[2:])} did not finish in {timeout} s")
            if kill is not None:
                if kill.kind == "delay":
                    fired = elapsed >= kill.seconds
                elif kill.kind == "appears":
                    fired = (out / kill.where).exists()
                elif kill.kind == "changes":
                    fired = _stat(out / kill.where) not in (baseline, None)
                else:
                    fired = _temp_present(out / kill.where, kill.prefix)
                if fired:
                    if kill.kind != "delay" and kill.seconds:
                        time.sleep(kill.seconds)
                    proc.send_signal(signal.SIGKILL)
                    proc.wait()
                    break
            time.sleep(0.005)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    return (
        ("killed", -9, stderr) if fired and proc.returncode == -signal.SIGKILL else ("exited", proc.returncode, stderr)
    )


def is_temp(path: Path) -> bool:
    return ".tmp" in path.name


def assert_nothing_torn(out: Path) -> list[Path]:
    """Every real file under ``out`` is whole; returns the leftover temporary files (all hidden)."""
    leftovers = []
    for path in sorted(p for p in out.rglob("*") if p.is_file()):
        if is_temp(path):
            assert path.name.startswith("."), f"temporary file {path} is not hidden"
            leftovers.append(path)
            continue
        if path.name == ".lock":
            continue
        data = path.read_bytes()
        suffix = path.suffix
        try:
            if suffix == ".json":
                json.loads(data)
            elif suffix == ".yaml":
                assert isinstance(yaml.safe_load(data), dict)
            elif suffix == ".csv":
                rows = list(csv.reader(io.StringIO(data.decode())))
                assert rows and all(len(r) == len(rows[0]) for r in rows)
            elif suffix == ".safetensors":
                with safe_open(str(path), framework="pt") as f:
                    for key in f.keys():  # noqa: SIM118 - safe_open is not a dict
                        f.get_tensor(key)
            elif suffix == ".npy":
                np.load(path)
            elif suffix == ".png":
                assert data.startswith(b"\x89PNG") and data.rstrip().endswith(b"IEND\xaeB`\x82")
            elif suffix == ".pdf":
                assert data.startswith(b"%PDF") and b"%%EOF" in data[-64:]
            elif suffix in (".md", ".html"):
                assert data.strip()
        except Exception as e:  # noqa: BLE001 - any failure to parse is a torn file
            pytest.fail(f"torn file {path.relative_to(out)} after a kill: {type(e).__name__}: {e}")
    return leftovers


def plant_leftovers(out: Path, places: list[tuple[str, str]]) -> list[Path]:
    """Garbage temporary files named like fileio's (``.<name>.<random>.tmp<suffix>``) that a kill may leave."""
    planted = []
    for directory, name in places:
        d = out / directory
        d.mkdir(parents=True, exist_ok=True)
        path = d / f".{name}.planted.tmp{Path(name).suffix}"
        path.write_bytes(b"{ torn" if name.endswith(".json") else b"\x00\x01 torn")
        planted.append(path)
    return planted


def kill_until_done(
    cmd: list[str], out: Path, env: dict[str, str], kills: list[Kill], leftovers: list[tuple[str, str]]
) -> list[str]:
    """Apply ``kills`` in order (each to a fresh attempt), plant leftovers, then run to completion."""
    log: list[str] = []
    delivered = 0
    for kill in kills:
        status, code, stderr = attempt(cmd, out, env, kill)
        if status == "exited":
            assert code == 0, f"attempt ended with {code} instead of being killed {kill.describe()}:\n{stderr[-3000:]}"
            log.append(f"finished before the kill {kill.describe()}")
            break
        delivered += 1
        found = assert_nothing_torn(out)
        lock = "; stale .lock left" if (out / ".lock").exists() else ""
        log.append(f"kill {delivered} {kill.describe()}: {len(found)} leftover temp file(s){lock}")
    assert delivered >= 5, f"only {delivered} kills landed before the run finished:\n" + "\n".join(log)
    plant_leftovers(out, leftovers)
    status, code, stderr = attempt(cmd, out, env, None)
    assert status == "exited" and code == 0, f"the final rerun failed ({code}):\n{stderr[-3000:]}"
    assert_nothing_torn(out)
    return log


def strip_volatile(obj: Any, out: Path) -> Any:
    """``obj`` without wall-time fields, with the output directory's path replaced by ``OUT``."""
    if isinstance(obj, dict):
        return {k: strip_volatile(v, out) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [strip_volatile(v, out) for v in obj]
    if isinstance(obj, str):
        return obj.replace(str(out), "OUT")
    return obj


# ----------------------------------------------------------------------------------------------
# kill -9: train


@pytest.mark.slow
def test_train_survives_kill_9_anywhere(tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(20260531)
    reference = tmp_path / "reference"
    uninterrupted = start(peanchor_cmd("train", *SMOKE, "--out", str(reference)), env)  # alongside the kills

    out = tmp_path / "killed"
    jitter = lambda: rng.uniform(0.0, 0.05)
    kills = [
        Kill("delay", seconds=rng.uniform(0.2, 1.5)),  # still importing
        Kill("temp", "", "config.yaml", jitter(), slow=True),
        Kill("temp", "checkpoint", "state.safetensors", jitter(), slow=True),  # epoch 1 state mid-write
        Kill("changes", "checkpoint/state.safetensors", seconds=jitter()),  # right after epoch 1's state
        Kill("temp", "", "metrics.csv", jitter(), slow=True),  # epoch 2: state written, metrics mid-write
        Kill("temp", "", "model.safetensors", jitter(), slow=True),
        Kill("appears", "model.safetensors", seconds=jitter(), slow=True),  # before summary.json
    ]
    leftovers = [
        ("", "model.safetensors"),
        ("", "summary.json"),
        ("checkpoint", "state.safetensors"),
        ("", "metrics.csv"),
    ]
    try:
        log = kill_until_done(peanchor_cmd("train", *SMOKE, "--out", str(out)), out, env, kills, leftovers)
    finally:
        finish(uninterrupted)
    print("\n".join(log))

    assert (out / "model.safetensors").read_bytes() == (reference / "model.safetensors").read_bytes(), log
    for name in ("summary.json",):
        a = strip_volatile(json.loads((out / name).read_text()), out)
        b = strip_volatile(json.loads((reference / name).read_text()), reference)
        assert a == b
    drop_seconds = lambda text: [r[:-1] for r in csv.reader(io.StringIO(text))]
    assert drop_seconds((out / "metrics.csv").read_text()) == drop_seconds((reference / "metrics.csv").read_text())
    assert not (out / ".lock").exists()


# ----------------------------------------------------------------------------------------------
# kill -9: reproduce


@pytest.mark.slow
def test_reproduce_survives_kill_9_anywhere(tmp_path: Path, env: dict[str, str]) -> None:
    rng = random.Random(7)
    args = ("reproduce", *SMOKE, "--conditions", "none,ape")
    reference = tmp_path / "reference"
    uninterrupted = start(peanchor_cmd(*args, "--out", str(reference)), env)  # alongside the kills

    out = tmp_path / "killed"
    jitter = lambda: rng.uniform(0.0, 0.05)
    kills = [
        Kill("delay", seconds=rng.uniform(0.2, 1.5)),
        Kill("temp", "", "reproduce.json", jitter(), slow=True),
        Kill("changes", "runs/none-s0/checkpoint/state.safetensors", seconds=jitter()),
        Kill("temp", "runs/none-s0/analysis", "analysis", jitter(), slow=True),
        Kill("appears", "status/none-s0.json", seconds=jitter()),
        Kill("temp", "runs/ape-s0", "model.safetensors", jitter(), slow=True),
        Kill("temp", "", "results.json", jitter(), slow=True),
        Kill("temp", "figures", "", jitter(), slow=True),
    ]
    leftovers = [
        ("", "results.json"),
        ("status", "ape-s0.json"),
        ("runs/ape-s0/analysis", "analysis.json"),
        ("runs/none-s0", "model.safetensors"),
        ("", "reproduce.json"),
    ]
    try:
        log = kill_until_done(peanchor_cmd(*args, "--out", str(out)), out, env, kills, leftovers)
    finally:
        finish(uninterrupted)
    print("\n".join(log))

    a = strip_volatile(json.loads((out / "results.json").read_text()), out)
    b = strip_volatile(json.loads((reference / "results.json").read_text()), reference)
    assert a == b
    for cell in ("none-s0", "ape-s0"):
        model = out / "runs" / cell / "model.safetensors"
        assert model.read_bytes() == (reference / "runs" / cell / "model.safetensors").read_bytes()
    for name in ("report.md", "report.html"):
        assert (out / name).is_file()
    assert not (out / ".lock").exists()


def _children(pid: int) -> set[int]:
    """Direct children of ``pid`` (Linux /proc)."""
    out: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out.update(int(c) for c in (task / "children").read_text().split())
        except OSError:
            pass
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
def test_reproduce_workers_die_with_a_killed_parent(tmp_path: Path, env: dict[str, str]) -> None:
    out = tmp_path / "grid"
    proc = subprocess.Popen(
        peanchor_cmd("reproduce", *SMOKE, "--conditions", "none,ape", "--jobs", "2", "--out", str(out)),
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 300
        while len(workers) < 2 or not any((out / "runs").glob("*/.lock")):  # two workers, one busy in a cell
            assert proc.poll() is None, "reproduce ended before its workers were seen"
            assert time.monotonic() < deadline, "no worker processes appeared"
            workers |= {c for c in _children(proc.pid) if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text()}
            time.sleep(0.02)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while any(_alive(w) for w in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        survivors = sorted(w for w in workers if _alive(w))
        assert not survivors, f"worker processes {survivors} kept running after their parent was killed"
    finally:
        for w in workers:  # descendants of the process this test started
            if _alive(w):
                os.kill(w, signal.SIGKILL)


# ----------------------------------------------------------------------------------------------
# Determinism


@pytest.mark.slow
def test_same_seed_same_results_json(tmp_path: Path, env: dict[str, str]) -> None:
    """Two reproduce runs side by side (they also share the scenes cache) give the same results."""
    outs = [tmp_path / "a", tmp_path / "b"]
    args = ("reproduce", *SMOKE, "--conditions", "none,sincos")
    procs = [start(peanchor_cmd(*args, "--out", str(o)), env) for o in outs]
    for proc in procs:
        finish(proc)
    results = [strip_volatile(json.loads((o / "results.json").read_text()), o) for o in outs]
    assert results[0] == results[1]
    assert len(results[0]["models"]) == 2 and not results[0]["failed"]
    for cell in ("none-s0", "sincos-s0"):
        a, b = ((o / "runs" / cell / "model.safetensors").read_bytes() for o in outs)
        assert a == b


# ----------------------------------------------------------------------------------------------
# Concurrency


@pytest.mark.slow
def test_a_second_process_on_the_same_run_dir_is_refused(tmp_path: Path, env: dict[str, str], capsys) -> None:
    out = tmp_path / "run"
    slow = {**env, "PEANCHOR_TEST_SLOW_REPLACE": "1.0"}  # every write takes a second: the lock is held a while
    first = subprocess.Popen(
        peanchor_cmd("train", *SMOKE, "--out", str(out)), env=slow, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 300
        while not (out / ".lock").exists():
            assert first.poll() is None, "the first run ended before taking its lock"
            assert time.monotonic() < deadline, "the first run never took its lock"
            time.sleep(0.01)
        time.sleep(0.05)  # the owner line is written right after the exclusive create
        assert (out / ".lock").read_text().split()[0] == str(first.pid)
        code = main(["train", *SMOKE, "--out", str(out)])
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and len(err) == 1 and err[0].startswith("peanchor: error:"), err
        assert "in use by another peanchor process" in err[0] and str(first.pid) in err[0]
        assert first.poll() is None, "the first run must still be running (or the refusal proves nothing)"
        with pytest.raises(RunDirError, match="in use"):  # reproduce, analyze, import take the same lock
            fileio.RunLock(out).acquire()
    finally:
        first.kill()  # kill -9 while it holds the lock
        first.wait()
    # The dead owner's lock is stale: the next process takes it over instead of waiting forever.
    assert (out / ".lock").read_text().split()[0] == str(first.pid)
    lock = fileio.RunLock(out)
    lock.acquire()
    assert (out / ".lock").read_text().split()[0] == str(os.getpid())
    lock.release()
    assert not (out / ".lock").exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.mark.parametrize("content", ["dead", "torn", "empty"])
def test_a_stale_lock_does_not_block(tmp_path: Path, content: str) -> None:
    out = tmp_path / "run"
    out.mkdir()
    import socket

    text = {"dead": f"{_dead_pid()} {socket.gethostname()}\n", "torn": "12", "empty": ""}[content]
    (out / ".lock").write_text(text)
    t0 = time.monotonic()
    assert main(["train", *SMOKE, "--out", str(out)]) == 0
    assert time.monotonic() - t0 < 300
    assert (out / "summary.json").is_file() and not (out / ".lock").exists()


def test_a_live_lock_of_another_process_is_refused_at_once(tmp_path: Path, capsys) -> None:
    out = tmp_path / "grid"
    out.mkdir()
    import socket

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        (out / ".lock").write_text(f"{sleeper.pid} {socket.gethostname()}\n")
        before = sorted(p.name for p in out.rglob("*"))
        t0 = time.monotonic()
        code = main(["reproduce", *SMOKE, "--conditions", "none", "--out", str(out)])
        assert time.monotonic() - t0 < 60
        err = capsys.readouterr().err.strip().splitlines()
        assert code != 0 and len(err) == 1 and "in use by another peanchor process" in err[0], err
        assert sorted(p.name for p in out.rglob("*")) == before
    finally:
        sleeper.kill()
        sleeper.wait()


# ----------------------------------------------------------------------------------------------
# Disk full / unwritable output


def _enospc(*args: Any, **kwargs: Any) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _no_temp_files(directory: Path) -> bool:
    return not any(is_temp(p) for p in directory.rglob("*"))


def test_replace_failing_with_enospc_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "result.json"
    fileio.write_json(target, {"version": 1})
    monkeypatch.setattr(fileio.os, "replace", _enospc)
    with pytest.raises(PeanchorError, match=r"cannot write .*result\.json: disk full"):
        fileio.write_json(target, {"version": 2})
    monkeypatch.undo()
    assert json.loads(target.read_text()) == {"version": 1}
    assert _no_temp_files(tmp_path)


def test_write_failing_with_enospc_keeps_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "model.safetensors"
    fileio.write_bytes(target, b"old bytes")

    def half_then_full(f: Any) -> None:
        f.write(b"partial")
        _enospc()

    with pytest.raises(PeanchorError, match="disk full"):
        fileio.atomic_write(target, half_then_full)
    assert target.read_bytes() == b"old bytes"
    assert _no_temp_files(tmp_path)


def test_fsync_failing_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "state.json"
    fileio.write_json(target, [1])
    monkeypatch.setattr(fileio.os, "fsync", _enospc)
    with pytest.raises(PeanchorError, match="disk full"):
        fileio.write_json(target, [2])
    monkeypatch.undo()
    assert json.loads(target.read_text()) == [1]
    assert _no_temp_files(tmp_path)


def test_unwritable_directory_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "locked" / "report.md"
    target.parent.mkdir()
    fileio.write_text(target, "old")
    target.parent.chmod(0o500)
    try:
        if os.geteuid() == 0:  # root ignores the mode bits: inject what a real user would get

            def denied(*args: Any, **kwargs: Any) -> None:
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

            monkeypatch.setattr(fileio.tempfile, "mkstemp", denied)
        with pytest.raises(PeanchorError, match=r"cannot write .*report\.md: .*[Pp]ermission denied"):
            fileio.write_text(target, "new")
    finally:
        monkeypatch.undo()
        target.parent.chmod(0o700)
    assert target.read_text() == "old"
    assert _no_temp_files(tmp_path)


def test_checkpoint_write_failing_stops_training_and_the_previous_checkpoint_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    from peanchor.presets.catalog import resolve_config
    from peanchor.training.loop import build_model, param_groups, train
    from peanchor.training.state import load_train_state

    out = tmp_path / "run"
    config = resolve_config("smoke")
    assert train(config, out, progress=False, max_epochs=1)["status"] == "stopped"
    state_path = out / "checkpoint" / "state.safetensors"
    before = state_path.read_bytes()

    real_replace = os.replace

    def full_for_state(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        if Path(dst).name == "state.safetensors":
            _enospc()
        real_replace(src, dst, *args, **kwargs)

    capsys.readouterr()
    monkeypatch.setattr(fileio.os, "replace", full_for_state)
    code = main(["train", *SMOKE, "--out", str(out)])
    monkeypatch.undo()
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("peanchor: error:")]
    # Progress lines (e.g. "resuming ...") may precede the error line.
    assert code != 0 and len(errors) == 1 and "Traceback" not in err, err
    assert "state.safetensors" in errors[0] and "disk full" in errors[0]
    assert state_path.read_bytes() == before
    assert not (out / ".lock").exists() and _no_temp_files(out)
    model = build_model(config, 10, 16)
    o = config.optim
    optimizer = torch.optim.AdamW(param_groups(model, o.weight_decay, o.pe_lr_mult, o.pe_weight_decay))
    assert load_train_state(state_path, model, optimizer).epoch == 1

    assert main(["train", *SMOKE, "--out", str(out)]) == 0  # space is back: the run resumes and finishes
    assert (out / "summary.json").is_file()


# ----------------------------------------------------------------------------------------------
# Locks are leases


def _foreign_lock(directory: Path, age_s: float, owner: str = "4242 node-17.cluster") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    lock = directory / ".lock"
    lock.write_text(f"{owner}\n")
    stamp = time.time() - age_s
    os.utime(lock, (stamp, stamp))
    return lock


def test_a_fresh_lock_from_another_host_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    lock = _foreign_lock(out, age_s=30)
    before = sorted(p.name for p in out.rglob("*"))
    code = main(["train", *SMOKE, "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert re.search(r"in use by another peanchor process \(4242 node-17\.cluster; refreshed 3\d s ago", err[0])
    assert "stale if not refreshed for 600 s" in err[0]
    assert sorted(p.name for p in out.rglob("*")) == before and lock.read_text() == "4242 node-17.cluster\n"


def test_a_stale_lock_from_another_host_is_taken_over_with_a_warning_naming_its_owner(tmp_path: Path) -> None:
    out = tmp_path / "run"
    _foreign_lock(out, age_s=601)  # a job killed on node-17, requeued here
    with pytest.warns(UserWarning) as caught:
        assert main(["train", *SMOKE, "--out", str(out)]) == 0
    taken = [str(w.message) for w in caught if "taking over the lock" in str(w.message)]
    assert len(taken) == 1, [str(w.message) for w in caught]
    assert re.search(r"process 4242 on node-17\.cluster, last refreshed it 6\d\d s ago \(stale after 600 s\)", taken[0])
    assert (out / "summary.json").is_file() and not (out / ".lock").exists()


def test_the_lease_time_is_configurable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fileio.LOCK_STALE_ENV, "5")
    with pytest.raises(RunDirError, match=r"refreshed [23] s ago, stale if not refreshed for 5 s"):
        fileio.RunLock(_foreign_lock(tmp_path / "fresh", age_s=2).parent).acquire()
    lock = fileio.RunLock(_foreign_lock(tmp_path / "stale", age_s=6).parent)
    with pytest.warns(UserWarning, match=r"process 4242 on node-17\.cluster, last refreshed it [67] s ago"):
        lock.acquire()
    lock.release()
    monkeypatch.setenv(fileio.LOCK_STALE_ENV, "soon")
    with pytest.raises(PeanchorError, match="PEANCHOR_LOCK_STALE_AFTER='soon': expected a positive number"):
        fileio.RunLock(tmp_path)


def test_the_holder_refreshes_its_lock(tmp_path: Path) -> None:
    lock = fileio.RunLock(tmp_path, stale_after=0.8)
    lock.acquire()
    try:
        old = time.time() - 100
        os.utime(lock.path, (old, old))  # as if it had not been refreshed for a while
        deadline = time.monotonic() + 10
        while time.time() - lock.path.stat().st_mtime > 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.time() - lock.path.stat().st_mtime < 50, "the holder did not refresh its lock"
        with pytest.raises(RunDirError, match="in use"):  # so it stays fresh for everybody else
            fileio.RunLock(tmp_path, stale_after=0.8).acquire()
    finally:
        lock.release()
    assert not lock.path.exists()


def test_a_lock_taken_over_from_its_holder_is_not_deleted_by_it(tmp_path: Path) -> None:
    first = fileio.RunLock(tmp_path, stale_after=600)
    first.acquire()
    first.path.write_text("999 elsewhere\n")  # another process took the lease over meanwhile
    first.release()
    assert first.path.read_text() == "999 elsewhere\n"
