"""Brute-force references on the patch grid."""

from __future__ import annotations

import itertools
import math

import numpy as np


def brute_distances(grid: tuple[int, int], metric: str) -> np.ndarray:
    """``(N, N)`` distances between the slots of a row-major ``grid``, by a loop over every pair."""
    h, w = grid
    n = h * w
    d = np.zeros((n, n))
    for i, j in itertools.product(range(n), repeat=2):
        dr, dc = i // w - j // w, i % w - j % w
        d[i, j] = abs(dr) + abs(dc) if metric == "manhattan" else math.hypot(dr, dc)
    return d


GRID = (3, 4)  # deliberately not square: catches row/column mix-ups
