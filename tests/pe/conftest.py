"""Fixtures of the PE tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def images() -> torch.Tensor:
    """Three random 16 px float images, the same every time."""
    return torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
