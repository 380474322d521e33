"""transformers' BEiT behind the analysis interface (HFViT with peanchor/adapters/hf_bias.py), against transformers' own
forward: the plain pass, pe_zero (zeroed bias tables), α (scaled tables), RPI (patches moved in pixel space),
head_ablate and Hook; per-layer, shared and absolute-table variants; tiny random configs, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

from peanchor.adapters import HFViT, wrap_model  # noqa: E402
from peanchor.interventions import Hook, Intervention, random_permutation  # noqa: E402
from tests.helpers.doses import check_started_passes  # noqa: E402
from tests.helpers.images import moved_in_pixels  # noqa: E402
from tests.helpers.passes import (assert_alpha_is_the_library_with_scaled_tables, assert_identity_hooks_are_plain,
                                  assert_pe_zero_is_the_library_with_zeroed_tables, logits)

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
            patch_size=8, layer_scale_init_value=1.0, num_labels=5)  # fmt: skip
VARIANTS = {
    "per_layer": dict(use_relative_position_bias=True),
    "shared": dict(use_shared_relative_position_bias=True),
    "per_layer_ape": dict(use_relative_position_bias=True, use_absolute_position_embeddings=True),
    "shared_and_per_layer": dict(use_relative_position_bias=True, use_shared_relative_position_bias=True),
}
TABLES = ("relative_position_bias_table", "position_embeddings")


def build(variant: str, cls: str = "BeitForImageClassification") -> HFViT:
    """A tiny random BEiT whose bias tables (zero at init) and q/k are large enough that positions visibly matter."""
    torch.manual_seed(0)
    model = getattr(T, cls)(T.BeitConfig(**TINY, **VARIANTS[variant])).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith(TABLES + ("q_proj.weight", "k_proj.weight")):
                torch.nn.init.normal_(p, std=0.5)
    return wrap_model(model)  # type: ignore[return-value]


def images(n: int = 2) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(1))



def own(model: HFViT, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.model(pixel_values=x).logits


def scale_tables(model: HFViT, factor: float) -> None:
    with torch.no_grad():
        for key, p in model.model.named_parameters():
            if key.endswith(TABLES):
                p.mul_(factor)


@pytest.mark.parametrize("variant", VARIANTS)
def test_logits_and_every_layers_tokens_are_transformers_own(variant: str) -> None:
    model, x = build(variant), images()
    with torch.no_grad():
        out = model.forward_intermediates(x)
        hidden = model.model(pixel_values=x, output_hidden_states=True).hidden_states
        tokens = torch.stack([model._layers[i].layernorm_before(hidden[i])[:, 1:] for i in range(2)], dim=1)
    assert model.pe_name == ("hf:rel_bias_ape" if "ape" in variant else "hf:rel_bias")
    assert "pe.bias" in model.hook_points.points and "input.grid" not in model.hook_points.points
    torch.testing.assert_close(out.logits, own(model, x), rtol=0, atol=1e-5)
    torch.testing.assert_close(out.tokens, tokens, rtol=0, atol=1e-5)


@pytest.mark.parametrize("variant", VARIANTS)
def test_pe_zero_is_transformers_forward_with_zeroed_tables(variant: str) -> None:
    model, x = build(variant), images()
    assert_pe_zero_is_the_library_with_zeroed_tables(model, x, lambda: scale_tables(model, 0.0), lambda: own(model, x))


@pytest.mark.parametrize("variant", VARIANTS)
def test_alpha_scales_the_bias_as_transformers_with_scaled_tables(variant: str) -> None:
    model, x = build(variant), images()
    assert_alpha_is_the_library_with_scaled_tables(model, x, lambda a: scale_tables(model, a), lambda: own(model, x))


@pytest.mark.parametrize("variant", ["per_layer", "shared"])
def test_rpi_moves_the_content_while_the_bias_stays_on_its_slots(variant: str) -> None:
    model, x = build(variant), images()
    perm = random_permutation(16, generator=torch.Generator().manual_seed(3))
    moved = moved_in_pixels(x, (4, 4), 8, perm)
    torch.testing.assert_close(logits(model, x, perm=perm), own(model, moved), rtol=0, atol=1e-5)
    assert not torch.allclose(logits(model, x, perm=perm), logits(model, x), atol=1e-3)


def test_head_ablate_leaves_the_attention_at_its_projection_bias() -> None:
    model, x = build("per_layer"), images()
    attn = model._layers[1].attention
    handle = attn.o_proj.register_forward_pre_hook(lambda m, args: (torch.zeros_like(args[0]),))  # no head
    reference = logits(model, x)
    handle.remove()
    torch.testing.assert_close(logits(model, x, "head_ablate:layers=1"), reference, rtol=0, atol=1e-6)


def test_an_identity_hook_is_the_plain_pass_and_a_bias_hook_sees_the_bias() -> None:
    model, x = build("shared_and_per_layer"), images()
    plain = logits(model, x)
    assert_identity_hooks_are_plain(model, x, ("blocks.1.mlp", "blocks.0.residual", "blocks.1.attn.heads"))
    seen = []
    iv = Intervention().with_edits(Hook("pe.bias", lambda b: seen.append(b) or b))
    with torch.no_grad():
        torch.testing.assert_close(model.forward_intermediates(x, iv).logits, plain, rtol=0, atol=1e-5)
    assert seen[0].shape == (2, 4, 17, 17)  # (L, H, T, T): CLS and 16 patches


def test_a_backbone_without_a_head_gives_its_pooled_features() -> None:
    model, x = build("shared", "BeitModel"), images()
    with torch.no_grad():
        torch.testing.assert_close(model.forward_intermediates(x).logits, model.model(pixel_values=x).pooler_output,
                                   rtol=0, atol=1e-5)  # fmt: skip
    assert not model.has_head


def test_started_passes_of_a_dose_sweep_equal_separate_passes() -> None:
    """forward_doses starts passes at later layers from cached residuals (Start): bit for bit the separate passes."""
    torch.manual_seed(0)
    config = T.BeitConfig(**dict(TINY, num_hidden_layers=3), **VARIANTS["per_layer_ape"])
    model = wrap_model(T.BeitForImageClassification(config).eval())
    check_started_passes(model, images(), model._layers)
