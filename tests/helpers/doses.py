"""The started-pass check of tests/interventions/test_doses.py (forward_doses bit for bit the separate passes), for
the backend tests that run it on their own models; that module is imported by its path (pytest's importlib mode)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

_KEY = "peanchor_tests_interventions_test_doses"


def check_started_passes(model: Any, images: Any, blocks: Any) -> None:
    """``forward_doses`` over every dose the model takes equals the separate passes, with fewer blocks run."""
    if _KEY not in sys.modules:
        spec = importlib.util.spec_from_file_location(_KEY, Path(__file__).parents[1] / "interventions/test_doses.py")
        assert spec is not None and spec.loader is not None
        sys.modules[_KEY] = module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    sys.modules[_KEY].check_equal_to_separate_calls(model, images, blocks)
