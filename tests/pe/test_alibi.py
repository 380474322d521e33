"""2D ALiBi against CROMA's definition (Fuller et al. 2023, eq. for 2D-ALiBi: bias_ij = −m_h · ‖p_i − p_j‖₂ with
ALiBi's geometric slopes m_h = 2^(−8h/H)), written as a loop; its promise (relative) and its α."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.pe import PEContext, create_pe


def test_the_bias_is_the_papers_loop() -> None:
    ctx = PEContext(embed_dim=32, num_heads=4, depth=2, grid=(3, 5))
    bias = create_pe("alibi", ctx).attn_bias(1.0)  # (1, H, T, T)
    assert bias.shape == (1, 4, 16, 16)
    for h in range(4):
        slope = 2 ** (-8 * (h + 1) / 4)
        for i in range(15):
            for j in range(15):
                (ri, ci), (rj, cj) = divmod(i, 5), divmod(j, 5)
                expect = -slope * math.sqrt((ri - rj) ** 2 + (ci - cj) ** 2)
                assert abs(float(bias[0, h, 1 + i, 1 + j]) - expect) < 1e-6
    assert bias[0, :, 0].abs().max() == 0 and bias[0, :, :, 0].abs().max() == 0  # CLS: no bias either way


def test_the_bias_depends_only_on_the_offset_and_alpha_scales_the_slopes() -> None:
    ctx = PEContext(embed_dim=32, num_heads=2, depth=1, grid=(4, 4))
    pe = create_pe("alibi", ctx)
    bias = pe.attn_bias(1.0)[0, :, 1:, 1:]  # (H, N, N)
    for i in range(16):
        for j in range(16):
            shifted = [(divmod(i, 4)[0] + dy, divmod(i, 4)[1] + dx, divmod(j, 4)[0] + dy, divmod(j, 4)[1] + dx)
                       for dy in range(-3, 4) for dx in range(-3, 4)]  # fmt: skip
            for ri, ci, rj, cj in shifted:  # both positions moved by the same offset, still on the grid
                if all(0 <= v < 4 for v in (ri, ci, rj, cj)):
                    assert torch.equal(bias[:, ri * 4 + ci, rj * 4 + cj], bias[:, i, j])
    torch.testing.assert_close(pe.attn_bias(0.5), 0.5 * pe.attn_bias(1.0), rtol=0, atol=0)
    assert pe.attn_bias(0.0) is None


def test_options_it_cannot_take_are_one_line() -> None:
    ctx = PEContext(embed_dim=32, num_heads=2, depth=1, grid=(4, 4))
    with pytest.raises(ValueError, match="^positional encoding 'alibi' cannot take slope; it takes no options$"):
        create_pe("alibi", ctx, slope=2.0)
