"""The conditional PE, PEG (peanchor.pe.conditional): its defining properties, beyond the registry-wide tests of
tests/models/test_vit.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from peanchor.interventions import random_permutation
from peanchor.pe import PEContext, create_pe


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
