"""The relative-bias PE (peanchor.pe.relative): its defining properties, beyond the registry-wide tests of
tests/models/test_vit.py; and, with PEG, α = 0 is position-free."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.interventions import random_permutation
from peanchor.models.vit import BlockPass
from peanchor.pe import PEContext, create_pe
from peanchor.pe.relative import relative_offset_index


# --- relbias -------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [(3, 5), (4, 4), (1, 3)])
def test_offset_index_is_a_bijection_onto_offsets(grid):
    rows, cols = grid
    idx = relative_offset_index(grid)
    n = rows * cols
    seen: dict[tuple[int, int], int] = {}
    for i in range(n):
        for j in range(n):
            off = (i // cols - j // cols, i % cols - j % cols)
            assert seen.setdefault(off, int(idx[i, j])) == int(idx[i, j])
    assert len(set(seen.values())) == len(seen) == (2 * rows - 1) * (2 * cols - 1)
    assert int(idx.min()) == 0 and int(idx.max()) == len(seen) - 1


def _by_offset(values: torch.Tensor, grid: tuple[int, int]) -> dict[tuple[int, int], torch.Tensor]:
    """Check ``values[..., i, j]`` depends on the slot offset only; return one value per offset."""
    rows, cols = grid
    n = rows * cols
    out: dict[tuple[int, int], torch.Tensor] = {}
    for i in range(n):
        for j in range(n):
            off = (i // cols - j // cols, i % cols - j % cols)
            ref = out.setdefault(off, values[..., i, j])
            torch.testing.assert_close(values[..., i, j], ref, rtol=1e-6, atol=1e-6)
    return out


@pytest.mark.parametrize("alpha", [1.0, 0.37])
def test_relbias_matrix_depends_only_on_relative_offset(alpha):
    torch.manual_seed(0)
    grid = (3, 5)
    ctx = PEContext(embed_dim=32, num_heads=4, depth=3, grid=grid)
    pe = create_pe("relbias", ctx)
    bias = pe.attn_bias(alpha)
    assert bias.shape == (3, 4, 16, 16)  # (L, H, T, T): one table per block, CLS first
    assert torch.equal(bias[:, :, 0], torch.zeros(3, 4, 16)) and torch.equal(bias[:, :, :, 0], torch.zeros(3, 4, 16))
    offsets = _by_offset(bias[:, :, 1:, 1:], grid)
    assert len(offsets) == 5 * 9
    # Every offset reads its own table row, scaled by alpha; the layers have their own tables.
    for (dy, dx), value in offsets.items():
        row = (dy + 2) * 9 + (dx + 4)
        torch.testing.assert_close(value, alpha * pe.table[:, row])  # (L, H)
    assert not torch.allclose(bias[0], bias[1])
    torch.testing.assert_close(bias, alpha * pe.attn_bias(1.0))
    assert pe.attn_bias(0.0) is None  # alpha = 0 removes it exactly


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_relbias_attention_scores_depend_only_on_relative_offset(alpha, micro):
    """Two tokens with the same content: their logit q·k/√d + bias is a function of the slot offset."""
    model = micro("relbias", num_classes=3, img_size=20, patch_size=4)  # 5×5
    grid, heads = model.grid, model.blocks[0].attn.num_heads
    bias = model.pe.attn_bias(alpha)  # (L, H, T, T)
    for layer, block in enumerate(model.blocks):
        h = torch.randn(1, 1, 32).expand(1, 1 + 25, 32)  # same content in every slot (and CLS)
        q, k, _ = block.attn.qkv(h).view(1, 26, 3, heads, 32 // heads).permute(2, 0, 3, 1, 4)  # (1, H, T, hd)
        scores = q @ k.transpose(-1, -2) / math.sqrt(32 // heads) + bias[layer]  # (1, H, T, T)
        _by_offset(scores[0, :, 1:, 1:], grid)
        # ... and the model's attention is softmax(scores) v with exactly that bias.
        x = torch.randn(2, 26, 32)
        q, k, v = block.attn.qkv(x).view(2, 26, 3, heads, 32 // heads).permute(2, 0, 3, 1, 4)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(32 // heads) + bias[layer], dim=-1)
        ref = block.attn.proj((att @ v).transpose(1, 2).reshape(2, 26, 32))
        torch.testing.assert_close(block.attn(x, BlockPass(bias=bias[layer])), ref, rtol=1e-5, atol=1e-6)


def test_relbias_under_rpi_keeps_the_bias_on_slots(images, micro):
    """With the bias on slots, RPI changes the output; the first probe (before any attention) just moves."""
    model = micro("relbias")
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    base, moved = model.spatial_tokens(images), model.spatial_tokens(images, token_perm=perm)
    torch.testing.assert_close(moved[:, 0], base[:, 0, perm])
    assert not torch.allclose(moved[:, 1], base[:, 1, perm], atol=1e-4)


def test_relbias_options():
    ctx = PEContext(embed_dim=32, num_heads=2, depth=3, grid=(2, 3))
    shared = create_pe("relbias", ctx, shared=True)
    assert shared.table.shape == (1, 3 * 5, 2) and shared.attn_bias(1.0).shape == (1, 2, 7, 7)
    learned = create_pe("relbias", ctx, cls="learned")
    bias = learned.attn_bias(1.0)  # (3, 2, 7, 7)
    c = learned.cls_bias  # (L, 3, H): CLS→patch, patch→CLS, CLS→CLS
    torch.testing.assert_close(bias[:, :, 0, 1:], c[:, 0, :, None].expand(3, 2, 6))
    torch.testing.assert_close(bias[:, :, 1:, 0], c[:, 1, :, None].expand(3, 2, 6))
    torch.testing.assert_close(bias[:, :, 0, 0], c[:, 2])
    _by_offset(bias[:, :, 1:, 1:], (2, 3))
    with pytest.raises(ValueError, match="cls must be"):
        create_pe("relbias", ctx, cls="mean")


def test_relbias_init_is_trunc_normal_002():
    ctx = PEContext(embed_dim=384, num_heads=8, depth=12, grid=(14, 14))  # the paper's size
    table = create_pe("relbias", ctx).table
    assert table.shape == (12, 27 * 27, 8)
    # trunc_normal_(std=0.02) with torch's default cut at ±2 (absolute), as Swin and the model's own init do.
    assert abs(table.std().item() - 0.02) < 0.001 and abs(table.mean().item()) < 0.001


@pytest.mark.parametrize("pe", ["peg", "relbias"])
def test_alpha_zero_is_position_free(pe, images, micro):
    model = micro(pe)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(model(images, token_perm=perm, pe_scale=0.0), model(images, pe_scale=0.0))
