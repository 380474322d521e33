"""The conditional (PEG) and relative-bias PEs: their defining properties, beyond the registry-wide tests."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from peanchor.interventions import random_permutation
from peanchor.models.vit import BlockPass
from peanchor.pe import PE_REGISTRY, PEContext, create_pe
from peanchor.pe.relative import relative_offset_index


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))


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


# --- peg -----------------------------------------------------------------------------------------


def test_peg_conv_is_depthwise_3x3_with_bias(micro):
    model = micro("peg")
    conv = model.pe.conv
    assert conv.groups == conv.in_channels == conv.out_channels == 32
    assert conv.weight.shape == (32, 1, 3, 3) and conv.bias is not None and conv.padding == (1, 1)
    # Functionally: a change in one channel of one slot reaches only that channel, in the 3×3 around it.
    x = torch.randn(2, 1 + 16, 32)
    y = x.clone()
    y[:, 1 + 5, 7] += 1.0  # slot 5 = (row 1, col 1)
    diff = (model.pe.after_block(0, y, 1.0) - model.pe.after_block(0, x, 1.0)).abs()  # (B, T, D)
    changed = diff > 0
    assert changed[..., 7].any() and not changed[..., :7].any() and not changed[..., 8:].any()
    slots = {int(s) - 1 for s in changed[0, :, 7].nonzero().flatten()}
    assert slots == {r * 4 + c for r in range(3) for c in range(3)}  # rows 0-2, cols 0-2
    assert not changed[:, 0].any()  # CLS untouched


@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_peg_is_a_residual_scaled_dwconv_after_the_first_block_only(alpha, micro):
    model = micro("peg")
    x = torch.randn(2, 17, 32)
    out = model.pe.after_block(0, x, alpha)
    grid = x[:, 1:].transpose(1, 2).reshape(2, 32, 4, 4)  # (B, D, H, W)
    ref = F.conv2d(grid, model.pe.conv.weight, model.pe.conv.bias, padding=1, groups=32)
    torch.testing.assert_close(out[:, 1:], x[:, 1:] + alpha * ref.flatten(2).transpose(1, 2))
    assert torch.equal(out[:, 0], x[:, 0])
    assert torch.equal(model.pe.after_block(1, x, alpha), x)
    assert model.pe.add(x, alpha) is x and model.pe.rotary(alpha) is None and model.pe.attn_bias(alpha) is None


def test_peg_zero_padding_marks_the_border():
    """Constant tokens: the conv output tells corners, edges and interior apart, and nothing else."""
    ctx = PEContext(embed_dim=8, num_heads=2, depth=1, grid=(4, 4))
    pe = create_pe("peg", ctx)
    with torch.no_grad():
        pe.conv.weight.fill_(1.0)
        pe.conv.bias.zero_()
    out = pe.after_block(0, torch.ones(1, 17, 8), 1.0)[0, 1:, 0] - 1.0  # (N,): the number of in-grid neighbours
    assert out.view(4, 4).tolist() == [[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]]


@pytest.mark.parametrize("perm_seed", [None, 3])
def test_peg_alpha_zero_is_the_none_model_with_the_same_weights(images, perm_seed, micro):
    peg = micro("peg")
    none = micro("none")
    shared = {k: v for k, v in peg.state_dict().items() if not k.startswith("pe.")}
    none.load_state_dict(shared, strict=True)
    perm = None if perm_seed is None else random_permutation(16, generator=torch.Generator().manual_seed(perm_seed))
    assert torch.equal(peg(images, token_perm=perm, pe_scale=0.0), none(images, token_perm=perm))
    assert torch.equal(
        peg.spatial_tokens(images, token_perm=perm, pe_scale=0.0), none.spatial_tokens(images, token_perm=perm)
    )
    assert not torch.allclose(peg(images, token_perm=perm), none(images, token_perm=perm), atol=1e-5)


def test_peg_under_rpi_anchors_from_the_block_after_it(images, micro):
    """Block 0 sees no position (equivariant); the PEG after it makes layer 1 depend on slot neighbours."""
    model = micro("peg")
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    base, moved = model.spatial_tokens(images), model.spatial_tokens(images, token_perm=perm)
    torch.testing.assert_close(moved[:, 0], base[:, 0, perm])
    assert not torch.allclose(moved[:, 1], base[:, 1, perm], atol=1e-4)


def test_peg_options_are_checked():
    ctx = PEContext(embed_dim=8, num_heads=2, depth=2, grid=(3, 3))
    assert create_pe("peg", ctx, block=1).block == 1
    with pytest.raises(ValueError, match="peg block"):
        create_pe("peg", ctx, block=2)
    with pytest.raises(ValueError, match="kernel_size"):
        create_pe("peg", ctx, kernel_size=2)


@pytest.mark.parametrize("pe", ["peg", "relbias"])
def test_alpha_zero_is_position_free(pe, images, micro):
    model = micro(pe)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(model(images, token_perm=perm, pe_scale=0.0), model(images, pe_scale=0.0))


def test_every_module_of_the_pe_package_is_imported_so_a_new_file_registers_itself():
    """docs/ARCHITECTURE.md's "How to add a positional encoding": a file in peanchor/pe/ is all it takes."""
    import pkgutil
    import sys

    import peanchor.pe

    modules = [m.name for m in pkgutil.iter_modules(peanchor.pe.__path__)]
    assert {"absolute", "rotary", "relative", "conditional"} <= set(modules)
    assert all(f"peanchor.pe.{m}" in sys.modules for m in modules)
    owners = {cls.__module__ for cls in PE_REGISTRY.values()}
    assert owners == {f"peanchor.pe.{m}" for m in ("base", "absolute", "rotary", "relative", "conditional")}
