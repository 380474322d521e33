"""The installed `peanchor` console script, run as a user runs it: train, analyze, reproduce and report on the
smoke preset, each a real process, checked by its exit code and the files it writes.

The other subprocess tests are about failures (tests/test_cli.py: one-line errors; tests/core/test_interrupts.py,
also through this script: stop signals; tests/project/test_reliability.py: kills). These are the successful runs.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from peanchor.checkpoint.files import model_digest
from peanchor.results.records import read_analysis

from tests.helpers.paths import ROOT as REPO

pytestmark = pytest.mark.slow

PEANCHOR = shutil.which("peanchor")
HANG_GUARD = 600  # seconds: only keeps a run that never ends from hanging the suite


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """This checkout first on the path (the script imports it), a private data cache, one thread."""
    if PEANCHOR is None:
        pytest.skip("the `peanchor` console script is not installed (pip install -e .)")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    cache = tmp_path_factory.mktemp("cache")
    return {**os.environ, "PYTHONPATH": path, "PEANCHOR_CACHE": str(cache), "OMP_NUM_THREADS": "1"}


def peanchor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """``peanchor ARGS``; it must exit 0 without a traceback."""
    done = subprocess.run([str(PEANCHOR), *args], env=env, capture_output=True, text=True, timeout=HANG_GUARD,
                          check=False)  # fmt: skip
    assert done.returncode == 0, f"peanchor {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


def test_train_then_analyze(tmp_path, env):
    run = tmp_path / "run"
    peanchor(env, "train", "--preset", "smoke", "--pe", "rope", "--out", str(run), "--no-progress")
    assert {"config.yaml", "model.safetensors", "metrics.csv", "summary.json", "train.log"} <= {
        p.name for p in run.iterdir()
    }
    assert not (run / ".lock").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["pe"] == "rope"
    assert len((run / "metrics.csv").read_text().splitlines()) == 1 + summary["epochs"]  # header + one row per epoch
    assert f"epoch {summary['epochs']}/{summary['epochs']}" in (run / "train.log").read_text()

    peanchor(env, "analyze", str(run), "--no-progress")  # into RUN/analysis by default
    analysis = read_analysis(run / "analysis")
    assert (run / "analysis" / "analysis.csv").is_file()
    assert analysis.source["model_digest"] == model_digest(run) and analysis.source["run_dir"] == str(run)
    assert len(analysis.ssdc.normal) == len(analysis.ssdc.rpi) == summary["model_args"]["depth"]
    assert analysis.alpha_sweep, "rope is scalable: the α sweep runs by default"


def test_reproduce_then_report(tmp_path, env):
    out = tmp_path / "out"
    peanchor(env, "reproduce", "--preset", "smoke", "--conditions", "none,ape", "--out", str(out), "--no-progress")
    results = json.loads((out / "results.json").read_text())
    assert results["conditions"] == ["none", "ape"] and results["failed"] == []
    assert sorted(m["name"] for m in results["models"]) == ["ape-s0", "none-s0"]
    for cell in ("none-s0", "ape-s0"):
        assert (out / "runs" / cell / "model.safetensors").is_file()
        assert (out / "runs" / cell / "analysis" / "analysis.json").is_file()
    report = (out / "report.md").read_text()
    assert (out / "report.html").is_file() and (out / "figures").is_dir()

    # a results.json rendered elsewhere gives the same report
    copy = tmp_path / "copy"
    peanchor(env, "report", str(out / "results.json"), "--report-dir", str(copy))
    assert (copy / "report.md").read_text() == report
    assert (copy / "report.html").is_file() and {p.name for p in (copy / "figures").iterdir()} == {
        p.name for p in (out / "figures").iterdir()
    }
    # and the directory itself is assembled again from its cells' files
    (out / "results.json").unlink()
    (out / "report.md").unlink()
    peanchor(env, "report", str(out))
    again = json.loads((out / "results.json").read_text())
    assert [m["name"] for m in again["models"]] == [m["name"] for m in results["models"]]
    assert [m["delta_ssdc"] for m in again["models"]] == [m["delta_ssdc"] for m in results["models"]]
    assert (out / "report.md").is_file()
