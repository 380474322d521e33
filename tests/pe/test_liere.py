"""LieRE (Ostmeier et al., arXiv 2406.10322, eq. R(p) = exp(Σ_k p_k A_k), A_k skew-symmetric) against scipy's
matrix exponential in a loop over positions, and what it promises: R(0) = I, orthogonality, R(p) R(−p) = I, and
relative logits when (and only when, here) its generators commute."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import expm

from peanchor.pe import PEContext, create_pe
from peanchor.pe.lie import exp_rotations, skew
from tests.helpers.relative import offset_spread


def _ctx(grid=(3, 4)) -> PEContext:
    return PEContext(embed_dim=32, num_heads=2, depth=2, grid=grid)


@pytest.mark.parametrize("block", [16, 4])
def test_the_rotations_are_scipys_matrix_exponential_at_each_position(block: int) -> None:
    pe = create_pe("liere", _ctx(), block=block)
    mats = pe.rotation(1.0).mats  # (L, H, N, nb, b, b)
    gens = pe.generators().detach().double().numpy()  # (L, H, 2, nb, b, b)
    assert mats.shape == (2, 2, 12, 16 // block, block, block)
    for layer in range(2):
        for head in range(2):
            for t in range(12):
                r, c = divmod(t, 4)
                for j in range(16 // block):
                    expect = expm(r * gens[layer, head, 0, j] + c * gens[layer, head, 1, j])
                    np.testing.assert_allclose(mats[layer, head, t, j].detach().double().numpy(), expect, atol=2e-5)


def test_the_block_rotation_is_the_matrix_product_on_the_patch_tokens() -> None:
    pe = create_pe("liere", _ctx(), block=8)
    rot = pe.rotation(1.0).layer(1)  # (H, N, nb, b, b)
    q = torch.randn(3, 2, 1 + 12, 16)
    out = rot.apply(q, 1)
    assert torch.equal(out[:, :, 0], q[:, :, 0])  # CLS not rotated
    for t in range(12):
        full = torch.block_diag(*rot.mats[0, t].unbind(0))  # head 0, slot t: (hd, hd)
        torch.testing.assert_close(out[:, 0, 1 + t], q[:, 0, 1 + t] @ full.T, rtol=1e-5, atol=1e-6)


def test_what_liere_promises() -> None:
    pe = create_pe("liere", _ctx((4, 4)))
    with torch.no_grad():
        gens = pe.generators().double()  # (L, H, 2, 1, b, b)
        coords = torch.tensor([[0.0, 0.0], [1.0, 2.0], [-1.0, -2.0], [3.0, -1.5]], dtype=torch.float64)
        rot = exp_rotations(gens, coords, 1.0)  # (L, H, 4, 1, b, b)
        eye = torch.eye(16, dtype=torch.float64)
        torch.testing.assert_close(rot[:, :, 0], eye.expand_as(rot[:, :, 0]))  # R(0) = I
        torch.testing.assert_close(rot @ rot.mT, eye.expand_as(rot))  # orthogonal
        torch.testing.assert_close(rot[:, :, 1] @ rot[:, :, 2], eye.expand_as(rot[:, :, 0]))  # R(p) R(−p) = I
        assert pe.rotation(0.0) is None  # α = 0: no rotation


def _offset_spread(pe) -> float:
    rot = pe.rotation(1.0).layer(0)
    return offset_spread(lambda t: rot.apply(t, 1), pe.ctx.grid, pe.ctx.num_heads, pe.ctx.head_dim)


def test_liere_is_relative_when_its_generators_commute_and_not_in_general() -> None:
    torch.manual_seed(0)
    pe = create_pe("liere", _ctx((4, 4)))
    with torch.no_grad():
        pe.raw.mul_(8)  # rotations large enough to see
        assert _offset_spread(pe) > 1e-2  # random generators do not commute
        a = skew(0.2 * torch.randn(16, 16, generator=torch.Generator().manual_seed(1)))
        pe.raw.zero_()
        pe.raw[:, :, 0, 0] = a / 2  # skew(a / 2) = a for a skew-symmetric a: A_row = a
        pe.raw[:, :, 1, 0] = a  # A_col = 2a, which commutes with A_row
        torch.testing.assert_close(pe.generators()[0, 0, 1, 0], 2 * pe.generators()[0, 0, 0, 0])
        assert _offset_spread(pe) < 1e-4


def test_the_block_must_divide_the_head() -> None:
    with pytest.raises(ValueError, match="liere block must be >= 2 and divide the head dim 16, got 6"):
        create_pe("liere", _ctx(), block=6)
