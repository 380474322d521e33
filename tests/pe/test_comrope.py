"""ComRoPE-AP (Yu et al., arXiv 2506.03737: R(p) = exp(Σ_k p_k A_k) with commuting angle matrices; the
axis-partition form, block j of A_k non-zero only for its own axis) against scipy's expm of the full matrices, and
its promise: the logit depends only on the offset (their RoPE equation R(p)ᵀ R(q) = R(q − p))."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import block_diag, expm

from peanchor.pe import PEContext, create_pe
from tests.helpers.relative import offset_spread


def _pe(grid=(3, 4), block=4):
    return create_pe("comrope", PEContext(embed_dim=32, num_heads=2, depth=2, grid=grid), block=block)


def test_the_rotation_is_exp_of_the_two_commuting_full_matrices() -> None:
    pe = _pe()
    blocks = pe.angle_blocks().detach().double().numpy()  # (L, H, nb = 4, b, b)
    mats = pe.rotation(1.0).mats.detach().double().numpy()  # (L, H, N, nb, b, b)
    zero = np.zeros((4, 4))
    for layer in range(2):
        for head in range(2):
            b = blocks[layer, head]
            a_row = block_diag(b[0], zero, b[2], zero)  # even blocks: the row axis
            a_col = block_diag(zero, b[1], zero, b[3])  # odd blocks: the column axis
            np.testing.assert_allclose(a_row @ a_col, a_col @ a_row, atol=1e-12)  # they commute
            for t in range(12):
                r, c = divmod(t, 4)
                expect = expm(r * a_row + c * a_col)
                got = block_diag(*mats[layer, head, t])
                np.testing.assert_allclose(got, expect, atol=2e-5)


def test_the_logit_depends_only_on_the_offset() -> None:
    pe = _pe(grid=(4, 4), block=8)
    with torch.no_grad():
        pe.raw.mul_(8)  # large rotations
        for layer in range(2):
            rot = pe.rotation(1.0).layer(layer)
            assert offset_spread(lambda t: rot.apply(t, 1), (4, 4), 2, 16) < 1e-4
        assert pe.rotation(0.0) is None


def test_the_block_must_cut_the_head_into_two_or_more() -> None:
    with pytest.raises(ValueError, match="comrope block must be >= 2 and divide the head dim 16 into >= 2 blocks"):
        _pe(block=16)
