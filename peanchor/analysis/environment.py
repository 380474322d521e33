"""Where an analysis ran, for its record (``AnalysisResult.environment``): peanchor, torch and Python versions, the
git commit of the peanchor checkout when there is one, and the kernels (the CPU capability torch dispatches to,
or the GPU's name). Two CPUs of one capability can still give other bits (MKL takes other paths on AMD), so the
record names the capability, not a guarantee.

Imports: torch, :mod:`peanchor.core` (the version).
"""

from __future__ import annotations

import functools
import platform
import subprocess
from pathlib import Path

import torch

__all__ = ["analysis_environment"]


def _git_commit(directory: Path) -> str | None:
    """The commit checked out at ``directory`` (with "+changes" when the work tree differs), or None outside a git
    checkout (an installed wheel) or without git."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "."], cwd=directory,
                               capture_output=True, text=True, timeout=10)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() + ("+changes" if dirty.returncode == 0 and dirty.stdout.strip() else "")


@functools.cache
def _checkout_commit() -> str | None:
    """:func:`_git_commit` of peanchor's own checkout, read once per process: the code an analysis runs is the code
    imported when the process started, and two ``git`` processes per analysis cost more than many an analysis of a
    small model."""
    return _git_commit(Path(__file__).resolve().parents[1])


def analysis_environment(device: str) -> dict[str, str]:
    """Where an analysis ran, for its record: peanchor, torch and Python versions, the git commit of the peanchor
    checkout when there is one, and the kernels: the CPU capability torch dispatches to, or the GPU's name."""
    from peanchor.core.version import __version__

    env = {"peanchor": __version__, "torch": torch.__version__, "python": platform.python_version(),
           "cpu_capability": str(torch.backends.cpu.get_cpu_capability()), "device": str(device)}  # fmt: skip
    if str(device).startswith("cuda") and torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    commit = _checkout_commit()
    if commit:
        env["git_commit"] = commit
    return env
