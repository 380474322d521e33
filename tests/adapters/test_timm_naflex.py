"""timm's NaFlexViT behind the analysis interface (peanchor/adapters/timm_naflex.py), on dense fixed-grid batches,
against timm's own forward: the plain pass (logits and every layer's tokens), pe_zero (timm with zeroed tables),
α (timm with scaled tables), RPI (timm on images whose patches were moved), head_ablate and Hook; learned,
aspect-preserving, factorized and no tables, at the table's own grid and at a non-square other one; tiny random
models, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")
pytest.importorskip("timm.models.naflexvit")

from peanchor.adapters.backend import wrap_model
from peanchor.adapters.timm_naflex import TimmNaFlex
from peanchor.core.errors import ConfigError
from peanchor.interventions import Intervention, random_permutation
from tests.helpers.doses import check_started_passes
from tests.helpers.images import moved_in_pixels
from tests.helpers.passes import (assert_alpha_is_the_library_with_scaled_tables, assert_identity_hooks_are_plain,
                                  assert_logits_and_tokens_are_the_librarys,
                                  assert_pe_zero_is_the_library_with_zeroed_tables, logits)

PATCH = 8
SMALL = dict(patch_size=PATCH, depth=2, embed_dim=64, num_heads=4, num_classes=10, pos_embed_grid_size=(4, 4))
#: variant → (timm name, extra kwargs): one per distinct PE configuration of timm's NaFlexViTs.
VARIANTS = {
    "gap": ("naflexvit_base_patch16_gap", {}),  # learned table, 4 registers
    "par_gap": ("naflexvit_base_patch16_par_gap", {}),  # learned, aspect-preserving resize
    "parfac_gap": ("naflexvit_base_patch16_parfac_gap", {}),  # factorized row + column tables
    "map": ("naflexvit_base_patch16_map", {}),  # attention-pool head, 1 register
    "cls_bilinear": ("naflexvit_base_patch16_gap", dict(class_token=True, pos_embed_interp_mode="bilinear")),
    "none": ("naflexvit_base_patch16_gap", dict(pos_embed="none")),
}
TABLES = ("pos_embed", "pos_embed_y", "pos_embed_x")
#: The grids a model is wrapped at: the table's own (4x4) and a non-square other one (the table resized by NaFlex).
SIZES = {"own": None, "wide": (32, 48)}


def build(variant: str, size: str = "own", seed: int = 0) -> TimmNaFlex:
    """A tiny random NaFlexViT whose tables are large enough that positions visibly matter."""
    name, extra = VARIANTS[variant]
    torch.manual_seed(seed)
    raw = timm.create_model(name, pretrained=False, **SMALL, **extra).eval()
    with torch.no_grad():
        for key, p in raw.named_parameters():
            if key.endswith(TABLES + ("head.weight",)):
                torch.nn.init.normal_(p)
    return wrap_model(raw, SIZES[size])  # type: ignore[arg-type]


def images(model: TimmNaFlex, n: int = 2) -> torch.Tensor:
    return torch.randn(n, 3, *model.img_size, generator=torch.Generator().manual_seed(1))



def scaled_tables(model: TimmNaFlex, factor: float) -> None:
    with torch.no_grad():
        for key, p in model.model.named_parameters():
            if key.endswith(TABLES):
                p.mul_(factor)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_every_layers_tokens_are_timms_own(variant: str, size: str) -> None:
    model = build(variant, size)
    x = images(model)
    assert model.grid == ((4, 4) if size == "own" else (4, 6))
    assert model.pe_name == f"timm:naflex_{model.model.embeds.pos_embed_type}"
    assert_logits_and_tokens_are_the_librarys(model, x, [b.norm1 for b in model.model.blocks], model.num_prefix,
                                              lambda: model.model(x))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("variant", ["gap", "par_gap", "parfac_gap", "cls_bilinear"])
def test_pe_zero_is_timms_forward_with_zeroed_tables(variant: str, size: str) -> None:
    model = build(variant, size)
    x = images(model)
    assert_pe_zero_is_the_library_with_zeroed_tables(model, x, lambda: scaled_tables(model, 0.0),
                                                     lambda: model.model(x))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("variant", ["gap", "par_gap", "parfac_gap"])
def test_alpha_scales_the_table_as_timm_with_scaled_tables(variant: str, size: str) -> None:
    model = build(variant, size)
    x = images(model)
    assert_alpha_is_the_library_with_scaled_tables(model, x, lambda a: scaled_tables(model, a), lambda: model.model(x))


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("variant", ["gap", "parfac_gap"])
def test_rpi_moves_the_content_while_the_table_stays_on_its_slots(variant: str, size: str) -> None:
    """Moving the patch tokens under RPI is timm's forward on images whose patches were moved in pixel space."""
    model = build(variant, size)
    x = images(model)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        own = model.model(moved_in_pixels(x, model.grid, PATCH, perm))
    torch.testing.assert_close(logits(model, x, perm=perm), own, rtol=0, atol=1e-5)
    with torch.no_grad():  # a mean-pooled 2-block random model's logits hardly move: its tokens do
        moved, plain = (model.forward_intermediates(x, Intervention(q)).tokens for q in (perm, None))
    assert not torch.allclose(moved, plain, atol=1e-3)


def test_head_ablate_leaves_the_attention_at_its_projection_bias() -> None:
    model = build("gap")
    x = images(model)
    attn = model.model.blocks[1].attn
    handle = attn.register_forward_hook(lambda m, i, out: m.proj(torch.zeros_like(i[0])))  # no head contributes
    reference = logits(model, x)
    handle.remove()
    torch.testing.assert_close(logits(model, x, "head_ablate:layers=1"), reference, rtol=0, atol=1e-6)


@pytest.mark.parametrize("variant", ["gap", "parfac_gap"])
def test_an_identity_hook_at_each_point_is_the_plain_pass(variant: str) -> None:
    model = build(variant, "wide")
    x = images(model)
    points = sorted(p.replace("{k}", "1") for p in model.hook_points.points if p != "input.grid")
    assert "pe.table" in points and "blocks.1.residual" in points
    assert_identity_hooks_are_plain(model, x, points)


def test_pe_resample_to_its_own_grid_is_the_plain_pass_and_to_another_runs_there() -> None:
    model = build("gap", "wide")
    x = images(model)
    torch.testing.assert_close(logits(model, x, "pe_resample:grid=4x6"), logits(model, x), rtol=0, atol=1e-6)
    other = torch.randn(2, 3, 24, 40)
    assert logits(model, other, "pe_resample:grid=3x5").shape == (2, 10)


def test_started_passes_of_a_dose_sweep_equal_separate_passes() -> None:
    """forward_doses starts passes at later blocks from cached residuals (Start): bit for bit the separate passes."""
    torch.manual_seed(0)
    raw = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, **dict(SMALL, depth=3)).eval()
    model = wrap_model(raw)
    check_started_passes(model, images(model), model.model.blocks)


def test_the_backend_refuses_a_rotary_naflex_and_a_size_off_the_patch_grid() -> None:
    rotary = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, **SMALL, rope_type="axial")
    with pytest.raises(ConfigError, match="rotary NaFlexViT"):
        wrap_model(rotary)
    plain = timm.create_model("naflexvit_base_patch16_gap", pretrained=False, **SMALL)
    with pytest.raises(ConfigError, match="whole number"):
        wrap_model(plain, 30)
