"""The edit kinds on the transformers adapter: the same oracles as on peanchor's ViT (tests/interventions/test_kinds.py), on
small random configs of every supported family, and pe_resample against transformers' own interpolate_pos_encoding;
nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

from peanchor.adapters.hf_vit import HFViT  # noqa: E402
from peanchor.core.errors import ConfigError  # noqa: E402
from peanchor.interventions import Intervention, random_permutation  # noqa: E402

TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, image_size=16,
            patch_size=4)  # fmt: skip
FAMILIES = {
    "vit": lambda: T.ViTForImageClassification(T.ViTConfig(num_labels=5, **TINY)),
    "deit": lambda: T.DeiTForImageClassification(T.DeiTConfig(num_labels=5, **TINY)),
    "dinov2": lambda: T.Dinov2ForImageClassification(T.Dinov2Config(num_labels=5, **TINY)),
    "dinov2_reg": lambda: T.Dinov2WithRegistersModel(T.Dinov2WithRegistersConfig(num_register_tokens=3, **TINY)),
    "clip": lambda: T.CLIPVisionModel(T.CLIPVisionConfig(**TINY)),
    "siglip": lambda: T.SiglipVisionModel(T.SiglipVisionConfig(**TINY)),
    "dinov3": lambda: T.DINOv3ViTModel(T.DINOv3ViTConfig(num_register_tokens=2, **TINY)),
}
TABLES = [f for f in FAMILIES if f != "dinov3"]


def build(family: str) -> HFViT:
    """A small random model whose table and q/k are large enough for positions to matter."""
    torch.manual_seed(0)
    model = FAMILIES[family]().eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith(("position_embeddings", "position_embedding.weight")):
                torch.nn.init.normal_(p)
            if key.endswith(("q_proj.weight", "k_proj.weight")):
                torch.nn.init.normal_(p, std=0.5)
    return HFViT(model)


def images(n: int = 2, size: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def out(model: HFViT, x: torch.Tensor, spec: str = "", perm: torch.Tensor | None = None) -> torch.Tensor:
    iv = Intervention.parse(spec, token_perm=perm) if spec else Intervention(perm)
    with torch.no_grad():
        return model.forward_intermediates(x, iv).logits  # logits, or the pooled features of a headless model


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_edits_are_bit_identical_to_the_plain_pass(family: str) -> None:
    model, x = build(family), images()
    points = model.hook_points.points
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    plain, plain_rpi = out(model, x), out(model, x, perm=perm)
    specs = ["head_ablate:heads=none", "patch:site=residual,layer=1", "patch:site=attn,layer=0",
             "patch:site=mlp,layer=1"]  # fmt: skip
    if "rope.tables" in points:
        specs += ["rope_planes:freqs=none", "rope_planes:layers=none"]
    if "input.grid" in points:
        specs += ["pe_resample:grid=4x4"]
    for spec in specs:
        assert torch.equal(out(model, x, spec), plain), spec
    assert torch.equal(out(model, x, "patch:site=residual,layer=0,donor=rpi", perm), plain_rpi)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_clean_residual_patched_into_an_rpi_pass_gives_the_clean_output(family: str) -> None:
    model, x = build(family), images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    clean = out(model, x)
    assert not torch.allclose(out(model, x, perm=perm), clean, atol=1e-4)
    for layer in range(2):
        assert torch.equal(out(model, x, f"patch:site=residual,layer={layer}", perm), clean)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_head_ablated_leaves_the_attention_at_its_projection_bias(family: str) -> None:
    model, x = build(family), images()
    layer = model._layers[1]
    attn = getattr(layer, model.family.attention)
    proj = getattr(attn, model.family.out_proj)
    handle = attn.register_forward_hook(lambda m, i, o: (proj.bias.expand_as(o[0]), *o[1:]))
    reference = out(model, x)
    handle.remove()
    assert torch.equal(out(model, x, "head_ablate:layers=1"), reference)


@pytest.mark.parametrize("family", TABLES)
def test_a_zeroed_table_is_the_model_without_one(family: str) -> None:
    model, x = build(family), images()
    edited = out(model, x, "pe_zero")
    owner = model._backbone.get_submodule(model.family.table[0])
    with torch.no_grad():
        getattr(owner, model.family.table[1]).zero_()
    assert torch.equal(edited, out(model, x))


@pytest.mark.parametrize("family", TABLES)
def test_pe_resample_agrees_with_transformers_interpolate_pos_encoding(family: str) -> None:
    """At 6x6 patches (24 px), bicubic, antialiased as each family's interpolate_pos_encoding does it (transformers
    5: only DINOv2-with-registers antialiases)."""
    antialias = "true" if family == "dinov2_reg" else "false"
    model, x = build(family), images(size=24)
    kwargs = {} if family.startswith("dinov2") else {"interpolate_pos_encoding": True}
    with torch.no_grad():
        own = model.model(pixel_values=x, **kwargs)
    theirs = own.logits if model.has_head else own.pooler_output
    assert torch.equal(out(model, x, f"pe_resample:grid=6x6,mode=bicubic,antialias={antialias}"), theirs)
    assert not torch.allclose(out(model, x, "pe_resample:grid=6x6,mode=bilinear"), theirs, atol=1e-4)


def test_dinov3_with_every_plane_removed_is_the_model_without_rotation() -> None:
    model, x = build("dinov3"), images()
    edited, planes = out(model, x, "rope_planes"), model.hook_points.planes
    rope = model._backbone.rope_embeddings
    with torch.no_grad():
        rope.inv_freq.zero_()  # every angle 0: cos 1, sin 0
    assert torch.equal(edited, out(model, x))
    assert sorted(c for p in planes for c in p.channels) == list(range(16))
    assert [p.freq for p in planes if p.axis == "x"] == [0, 1, 2, 3]


def test_rope_planes_of_one_layer_leave_the_other_layers_alone() -> None:
    model, x = build("dinov3"), images()
    one = out(model, x, "rope_planes:layers=1")
    assert not torch.equal(one, out(model, x)) and not torch.equal(one, out(model, x, "rope_planes"))
    both = out(model, x, "rope_planes:layers=0+rope_planes:layers=1")
    assert torch.equal(both, out(model, x, "rope_planes"))


def test_edits_a_transformers_model_cannot_take_are_one_line() -> None:
    vit, dinov3 = build("vit"), build("dinov3")
    cases = [
        (vit, images(), "rope_planes", "rope_planes acts at rope.tables, which hf:vit does not have; it has: pe.table"),
        (vit, images(), "pe_resample:grid=6x6", "images of 16x16 px give a 4x4 patch grid; this pass expects 6x6"),
        (vit, images(), "head_ablate:heads=0-2", "head_ablate:heads=0-2: the model has 2 heads (0-1)"),
    ]
    for model, x, spec, message in cases:
        with pytest.raises(ConfigError) as e:
            out(model, x, spec)
        assert message in str(e.value) and "\n" not in str(e.value), spec
    # pe_zero removes a rotation as it removes a table: every plane the identity
    assert torch.equal(out(dinov3, images(), "pe_zero"), out(dinov3, images(), "rope_planes"))
