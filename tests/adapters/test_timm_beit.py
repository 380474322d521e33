"""timm's BEiT behind the analysis interface (peanchor/adapters/timm_beit.py), against timm's own forward: the plain
pass, pe_zero (timm with zeroed bias tables), α (timm with scaled tables), RPI (timm on images whose patches were
moved), head_ablate and Hook; per-block, shared and absolute-table variants; tiny random models, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")

from peanchor.adapters import TimmBeit, load_timm_model, wrap_model  # noqa: E402
from peanchor.core.errors import ConfigError  # noqa: E402
from peanchor.interventions import Hook, Intervention, random_permutation  # noqa: E402
from tests.helpers.doses import check_started_passes  # noqa: E402
from tests.helpers.images import moved_in_pixels  # noqa: E402
from tests.helpers.passes import (assert_alpha_is_the_library_with_scaled_tables, assert_identity_hooks_are_plain,
                                  assert_logits_and_tokens_are_the_librarys,
                                  assert_pe_zero_is_the_library_with_zeroed_tables, logits)

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)  # a 4x4 grid
VARIANTS = {
    "per_block": {},
    "shared": dict(use_rel_pos_bias=False, use_shared_rel_pos_bias=True),
    "per_block_ape": dict(use_abs_pos_emb=True),
    "shared_and_per_block": dict(use_shared_rel_pos_bias=True),
}


def build(variant: str, seed: int = 0) -> TimmBeit:
    """A tiny random BEiT whose bias tables are large enough that positions visibly matter."""
    torch.manual_seed(seed)
    model = load_timm_model("beit_base_patch16_224", **SMALL, init_values=1.0, **VARIANTS[variant])
    with torch.no_grad():
        for key, p in model.model.named_parameters():
            if key.endswith(("relative_position_bias_table", "pos_embed")):
                torch.nn.init.normal_(p)
            if key.endswith("head.weight"):
                torch.nn.init.normal_(p)
    return model


def images(n: int = 2) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(1))



def scaled_tables(model: TimmBeit, factor: float) -> None:
    with torch.no_grad():
        for key, p in model.model.named_parameters():
            if key.endswith(("relative_position_bias_table", "pos_embed")):
                p.mul_(factor)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_every_layers_tokens_are_timms_own(variant: str) -> None:
    model, x = build(variant), images()
    assert model.pe_name == ("timm:rel_bias_ape" if "ape" in variant else "timm:rel_bias")
    assert_logits_and_tokens_are_the_librarys(model, x, [b.norm1 for b in model.model.blocks], 1,
                                              lambda: model.model(x))


@pytest.mark.parametrize("variant", VARIANTS)
def test_pe_zero_is_timms_forward_with_zeroed_tables(variant: str) -> None:
    model, x = build(variant), images()
    assert_pe_zero_is_the_library_with_zeroed_tables(model, x, lambda: scaled_tables(model, 0.0),
                                                     lambda: model.model(x))


@pytest.mark.parametrize("variant", VARIANTS)
def test_alpha_scales_the_bias_as_timm_with_scaled_tables(variant: str) -> None:
    model, x = build(variant), images()
    assert_alpha_is_the_library_with_scaled_tables(model, x, lambda a: scaled_tables(model, a), lambda: model.model(x))


@pytest.mark.parametrize("variant", ["per_block", "shared"])
def test_rpi_moves_the_content_while_the_bias_stays_on_its_slots(variant: str) -> None:
    """Moving the patch tokens under RPI is timm's forward on images whose 8x8 patches were moved in pixel space."""
    model, x = build(variant), images()
    perm = random_permutation(16, generator=torch.Generator().manual_seed(3))
    moved = moved_in_pixels(x, (4, 4), 8, perm)
    with torch.no_grad():
        torch.testing.assert_close(logits(model, x, perm=perm), model.model(moved), rtol=0, atol=1e-5)
    assert not torch.allclose(logits(model, x, perm=perm), logits(model, x), atol=1e-3)


def test_head_ablate_leaves_the_attention_at_its_projection_bias() -> None:
    model, x = build("per_block"), images()
    attn = model.model.blocks[1].attn
    handle = attn.register_forward_hook(lambda m, i, out: m.proj(torch.zeros_like(i[0])))  # no head contributes
    reference = logits(model, x)
    handle.remove()
    torch.testing.assert_close(logits(model, x, "head_ablate:layers=1"), reference, rtol=0, atol=1e-6)


def test_an_identity_hook_is_the_plain_pass_and_a_bias_hook_sees_the_bias() -> None:
    model, x = build("shared_and_per_block"), images()
    assert_identity_hooks_are_plain(model, x, ("blocks.1.mlp", "blocks.0.residual", "blocks.1.attn.heads"))
    seen = []
    iv = Intervention().with_edits(Hook("pe.bias", lambda b: seen.append(b) or torch.zeros_like(b)))
    with torch.no_grad():
        torch.testing.assert_close(model.forward_intermediates(x, iv).logits, logits(model, x, "pe_zero"))
    assert seen[0].shape == (2, 4, 17, 17)  # (L, H, T, T): CLS and 16 patches


def test_attention_weights_are_timms_eager_softmax_with_the_bias() -> None:
    model, x = build("per_block"), images()
    with torch.no_grad():
        maps = model.attention_maps(x)  # (B, L, H, T, T)
    assert maps.shape == (2, 2, 4, 17, 17)
    torch.testing.assert_close(maps.sum(-1), torch.ones(2, 2, 4, 17))


def test_the_backend_wraps_a_raw_beit_and_refuses_what_it_cannot_take() -> None:
    raw = timm.create_model("beit_base_patch16_224", pretrained=False, **SMALL)
    wrapped = wrap_model(raw)
    assert type(wrapped) is TimmBeit and wrapped.hook_points.points >= {"pe.bias", "blocks.{k}.attn"}
    with pytest.raises(ConfigError, match="pe_resample acts at input.grid|input.grid"):
        wrapped.forward_intermediates(images(), Intervention.parse("pe_resample:grid=5x5"))



@pytest.mark.parametrize("variant", ["per_block_ape", "shared"])
def test_started_passes_of_a_dose_sweep_equal_separate_passes(variant: str) -> None:
    """forward_doses starts passes at later blocks from cached residuals (Start): bit for bit the separate passes."""
    torch.manual_seed(0)
    model = load_timm_model("beit_base_patch16_224", **dict(SMALL, depth=3), init_values=1.0, **VARIANTS[variant])
    check_started_passes(model, images(), model.model.blocks)


def test_a_hook_at_a_point_beit_lacks_is_one_line_listing_its_points() -> None:
    model = build("per_block")
    with pytest.raises(ConfigError) as refused:
        model.forward_intermediates(images(), Intervention().with_edits(Hook("rope.tables", lambda t: t)))
    line = str(refused.value)
    assert "\n" not in line and "rope.tables" in line and "pe.bias" in line
