"""Distances between the positions of a token grid: the ``D`` of SSDC (Manhattan, as the paper, or Euclidean).

Imports: torch only.
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
from torch import Tensor

__all__ = ["Metric", "check_grid", "check_metric", "grid_distances"]

Metric = Literal["manhattan", "euclidean"]


def check_grid(grid: tuple[int, int]) -> tuple[int, int]:
    """``grid`` as ``(H, W)`` of positive ints, or a ValueError."""
    try:
        h, w = grid
    except (TypeError, ValueError):
        raise ValueError(f"grid must be a pair (H, W) of positive ints, got {grid!r}") from None
    if isinstance(h, bool) or isinstance(w, bool) or not all(isinstance(v, int) and v > 0 for v in (h, w)):
        raise ValueError(f"grid must be a pair (H, W) of positive ints, got {grid!r}")
    return int(h), int(w)


def check_metric(metric: str) -> str:
    """``metric`` if it is one of :data:`Metric`, else a ValueError."""
    if metric not in get_args(Metric):
        raise ValueError(f"metric must be one of {get_args(Metric)}, got {metric!r}")
    return metric


def grid_distances(grid: tuple[int, int], metric: Metric = "manhattan") -> Tensor:
    """Pairwise distances between the positions of an ``H x W`` token grid, row-major.

    Token ``t`` sits at row ``t // W``, column ``t % W``.

    Returns:
        float64 CPU tensor ``(N, N)`` with ``N = H * W``.

    >>> grid_distances((2, 2))
    tensor([[0., 1., 1., 2.],
            [1., 0., 2., 1.],
            [1., 2., 0., 1.],
            [2., 1., 1., 0.]], dtype=torch.float64)
    >>> grid_distances((1, 3), "euclidean")[0]
    tensor([0., 1., 2.], dtype=torch.float64)
    """
    h, w = check_grid(grid)
    check_metric(metric)
    t = torch.arange(h * w)
    coords = torch.stack([t // w, t % w], dim=-1).to(torch.float64)  # (N, 2) (row, col)
    diff = coords[:, None, :] - coords[None, :, :]  # (N, N, 2)
    if metric == "manhattan":
        return diff.abs().sum(dim=-1)  # (N, N)
    return diff.pow(2).sum(dim=-1).sqrt()  # (N, N)
