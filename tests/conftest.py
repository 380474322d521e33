"""Shared test setup."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(scope="session", autouse=True)
def one_thread():
    """Tiny models are dominated by per-op overhead, which intra-op threads only add to (badly so on a
    busy 2-core CI machine). Subprocess tests set their own environment."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
