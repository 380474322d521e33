"""Where the tests find the repository: its root (for docs/, examples/, benchmarks/, tools/) and the data files the
tests read, whatever folder a test file sits in."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # tests/helpers/paths.py -> the repository
TEST_DATA = ROOT / "tests" / "data"  # the files tests read (tests of peanchor.data sit beside them)
