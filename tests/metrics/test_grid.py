"""peanchor.metrics.grid: the slot distances against a loop over every pair, and the grid and metric refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from peanchor.metrics import grid_distances

from tests.helpers.grids import GRID, brute_distances as _brute_distances



@pytest.mark.parametrize("grid", [(2, 3), (3, 2), (4, 4), (1, 5)])
@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_grid_distances_row_major(grid: tuple[int, int], metric: str) -> None:
    got = grid_distances(grid, metric)
    assert got.dtype == torch.float64 and got.shape == (grid[0] * grid[1],) * 2
    np.testing.assert_allclose(got.numpy(), _brute_distances(grid, metric), atol=1e-12)


def test_grid_and_metric_refusals_to_the_letter() -> None:
    from peanchor.metrics.grid import check_grid, check_metric

    for grid in ((True, 2), (2, True), (0, 2), (2, 0), (2.5, 2), (2, -1)):
        with pytest.raises(ValueError, match=r"^grid must be"):
            check_grid(grid)
    assert check_grid((1, 1)) == (1, 1)
    with pytest.raises(ValueError, match=r"^metric must be one of \('manhattan', 'euclidean'\), got 'taxicab'$"):
        check_metric("taxicab")
    assert torch.equal(grid_distances(GRID), grid_distances(GRID, "manhattan"))  # the default
