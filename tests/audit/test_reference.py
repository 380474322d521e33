"""peanchor's reference for BEiT's relative position bias (``peanchor.audit.reference.relative_bias``) against a
brute-force loop over slot pairs and against timm's and transformers' own gathers by their
``relative_position_index``, on square and non-square grids; and ``reference_probs`` with a bias against a plain
softmax of the biased logits."""

from __future__ import annotations

import pytest
import torch

from peanchor.audit.reference import reference_probs, relative_bias

GRIDS = [(4, 4), (3, 5), (2, 7)]


def brute_force_bias(table: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """``(H, 1 + N, 1 + N)``: slot pairs one by one, offsets counted from (-(h-1), -(w-1)), then the three CLS rows."""
    rows, cols = grid
    n, last = rows * cols, table.shape[0]
    out = torch.empty(table.shape[1], n + 1, n + 1, dtype=torch.float64)
    for i in range(n + 1):
        for j in range(n + 1):
            if i == 0 and j == 0:
                row = last - 1
            elif i == 0:
                row = last - 3
            elif j == 0:
                row = last - 2
            else:
                (ri, ci), (rj, cj) = divmod(i - 1, cols), divmod(j - 1, cols)
                row = (ri - rj + rows - 1) * (2 * cols - 1) + (ci - cj + cols - 1)
            out[:, i, j] = table[row].double()
    return out


def _table(grid: tuple[int, int], heads: int = 3) -> torch.Tensor:
    rows, cols = grid
    return torch.randn((2 * rows - 1) * (2 * cols - 1) + 3, heads, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("grid", GRIDS)
def test_the_bias_is_the_brute_force_gather_by_slot_offset(grid: tuple[int, int]) -> None:
    table = _table(grid)
    assert torch.equal(relative_bias(table, grid), brute_force_bias(table, grid))


@pytest.mark.parametrize("grid", GRIDS)
def test_the_bias_equals_timm_s_and_transformers_gathers(grid: tuple[int, int]) -> None:
    timm_beit = pytest.importorskip("timm.models.beit")
    modeling_beit = pytest.importorskip("transformers.models.beit.modeling_beit")
    table = _table(grid)
    for index in (timm_beit.gen_relative_position_index(grid),
                  modeling_beit.BeitRelativePositionBias.generate_relative_position_index(grid)):  # fmt: skip
        theirs = table[index.view(-1)].view(index.shape[0], index.shape[1], -1).permute(2, 0, 1)  # (H, T, T)
        assert torch.equal(relative_bias(table, grid), theirs.double())


def test_reference_probs_add_the_layer_s_bias_to_the_logits() -> None:
    g = torch.Generator().manual_seed(1)
    q, k = torch.randn(2, 3, 5, 8, generator=g), torch.randn(2, 3, 5, 8, generator=g)  # (B, H, T, hd)
    bias = torch.randn(2, 3, 5, 5, generator=g)  # (L, H, T, T)
    got = reference_probs(q, k, 0.5, None, 1, 1, None, bias)
    want = torch.softmax(0.5 * q.double() @ k.double().transpose(-2, -1) + bias[1].double(), dim=-1)
    assert torch.allclose(got, want, atol=1e-12)
    shared = reference_probs(q, k, 0.5, None, 1, 1, None, bias[:1])  # one slice: every layer's
    assert torch.allclose(shared, torch.softmax(0.5 * q.double() @ k.double().transpose(-2, -1) + bias[0], -1))
