"""The started-pass check of tests/interventions/test_doses.py (forward_doses bit for bit the separate passes), for
the backend tests that run it on their own models; that module is imported by its path (pytest's importlib mode)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.helpers.paths import import_file

_KEY = "peanchor_tests_interventions_test_doses"


def check_started_passes(model: Any, images: Any, blocks: Any) -> None:
    """``forward_doses`` over every dose the model takes equals the separate passes, with fewer blocks run."""
    doses = import_file(Path(__file__).parents[1] / "interventions/test_doses.py", _KEY, reuse=True)
    doses.check_equal_to_separate_calls(model, images, blocks)
