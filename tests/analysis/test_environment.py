"""The environment an analysis records: versions, the CPU kernels torch dispatches to, and the git commit of a
checkout (marked when its work tree differs), none outside one."""

from __future__ import annotations

import platform
import subprocess

import torch

import peanchor
from peanchor.analysis.environment import _git_commit, analysis_environment


def _git(cwd, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd, check=True,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


def test_the_environment_names_versions_and_kernels():
    env = analysis_environment("cpu")
    assert env["peanchor"] == peanchor.__version__ and env["torch"] == torch.__version__
    assert env["python"] == platform.python_version() and env["device"] == "cpu"
    assert env["cpu_capability"] == str(torch.backends.cpu.get_cpu_capability())
    assert "gpu" not in env


def test_the_commit_of_a_checkout_and_none_outside_one(tmp_path):
    assert _git_commit(tmp_path) is None
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "commit", "-qm", "a")
    head = _git(tmp_path, "rev-parse", "HEAD")
    assert _git_commit(tmp_path) == head
    (tmp_path / "a.py").write_text("x = 2\n")
    assert _git_commit(tmp_path) == head + "+changes"


def test_peanchors_own_commit_is_read_once_per_process(monkeypatch):
    from peanchor.analysis import environment

    environment._checkout_commit.cache_clear()
    calls = []
    monkeypatch.setattr(environment, "_git_commit", lambda d: calls.append(d) or "abc")
    try:
        assert [analysis_environment("cpu").get("git_commit") for _ in range(3)] == ["abc"] * 3
        assert len(calls) == 1 and calls[0] == environment.Path(environment.__file__).resolve().parents[1]
    finally:
        environment._checkout_commit.cache_clear()
