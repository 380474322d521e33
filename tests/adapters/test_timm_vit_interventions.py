"""The edit kinds on the timm adapter: the same oracles as on peanchor's ViT (tests/interventions/test_kinds.py), on tiny
random models of every family the adapter supports; nothing is downloaded."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")

from timm.layers import resample_abs_pos_embed  # noqa: E402

from peanchor.adapters import load_timm_model  # noqa: E402
from tests.helpers.doses import check_started_passes  # noqa: E402
from peanchor.core.errors import ConfigError  # noqa: E402
from peanchor.interventions import Intervention, random_permutation  # noqa: E402

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)  # a 4x4 grid

# (test id, timm name, extra create_model kwargs)
MODELS = [
    ("ape_cls", "vit_small_patch16_224", {}),
    ("none", "vit_small_patch16_224", {"pos_embed": "none"}),
    ("ape_no_embed_class", "deit3_small_patch16_224", {}),
    ("ape_cls_dist", "deit_small_distilled_patch16_224", {}),  # CLS + the distillation token
    ("ape_cls_reg4", "vit_small_patch14_reg4_dinov2", {}),
    ("ape_parallel_block", "vit_pwee_patch16_reg1_gap_256", {}),
    ("rope", "vit_small_patch16_rope_224", {}),
    ("rope_ape", "vit_small_patch16_rope_ape_224", {}),
    ("rope_mixed", "vit_small_patch16_rope_mixed_224", {}),
    ("eva02", "eva02_tiny_patch14_224", {}),
    ("rope_dinov3", "vit_small_patch16_dinov3", {}),
]
IDS = [m[0] for m in MODELS]
ROPE = [m for m in MODELS if "rope" in m[0] or m[0] == "eva02"]
TABLE = [m for m in MODELS if m[0].startswith("ape") or m[0] in ("rope_ape", "eva02")]
HEADS = [m for m in MODELS if m[0] != "ape_parallel_block"]  # a ParallelScalingBlock has no heads site
APE_ONLY = [m for m in TABLE if m[0].startswith("ape")]


def build(name: str, extra: dict, seed: int = 0, **over) -> torch.nn.Module:
    """A tiny random model with layer scale 1, a unit head and peaked attention, so positions visibly matter."""
    if not timm.is_model(name):
        pytest.skip(f"{name} is not in timm {timm.__version__}")
    torch.manual_seed(seed)
    model = load_timm_model(name, **dict(SMALL, init_values=1.0, **extra, **over))
    with torch.no_grad():
        torch.nn.init.normal_(model.model.head.weight)
        for key, p in model.model.named_parameters():
            if key.endswith(("qkv.weight", "q_proj.weight", "k_proj.weight")):
                p.mul_(8)
            if key == "pos_embed":
                torch.nn.init.normal_(p)
    return model


def images(n: int = 2, size: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def logits(model: torch.nn.Module, x: torch.Tensor, spec: str = "", perm: torch.Tensor | None = None) -> torch.Tensor:
    iv = Intervention.parse(spec, token_perm=perm) if spec else Intervention(perm)
    with torch.no_grad():
        return model.forward_intermediates(x, iv).logits


@pytest.mark.parametrize("tid, name, extra", MODELS, ids=IDS)
def test_identity_edits_are_bit_identical_to_the_plain_pass(tid: str, name: str, extra: dict) -> None:
    model, x = build(name, extra), images()
    points = model.hook_points.points
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    plain, plain_rpi = logits(model, x), logits(model, x, perm=perm)
    specs = ["patch:site=residual,layer=1"]
    if "blocks.{k}.attn.heads" in points:
        specs += ["head_ablate:heads=none", "patch:site=attn,layer=0", "patch:site=mlp,layer=1"]
    if "rope.tables" in points:
        specs += ["rope_planes:freqs=none", "rope_planes:layers=none"]
    if "input.grid" in points:
        specs += ["pe_resample:grid=4x4"]
    for spec in specs:
        assert torch.equal(logits(model, x, spec), plain), spec
    assert torch.equal(logits(model, x, "patch:site=residual,layer=0,donor=rpi", perm), plain_rpi)


@pytest.mark.parametrize("tid, name, extra", MODELS, ids=IDS)
def test_the_clean_residual_patched_into_an_rpi_pass_gives_the_clean_logits(tid: str, name: str, extra: dict) -> None:
    model, x = build(name, extra), images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    clean = logits(model, x)
    if tid != "none":
        assert not torch.allclose(logits(model, x, perm=perm), clean, atol=1e-3)
    for layer in range(2):
        assert torch.equal(logits(model, x, f"patch:site=residual,layer={layer}", perm), clean)


@pytest.mark.parametrize("tid, name, extra", HEADS, ids=[m[0] for m in HEADS])
def test_every_head_ablated_leaves_the_attention_at_its_projection_bias(tid: str, name: str, extra: dict) -> None:
    model, x = build(name, extra), images()
    attn = model.model.blocks[1].attn
    handle = attn.register_forward_hook(lambda m, i, out: m.proj(torch.zeros_like(i[0])))  # no head contributes
    reference = logits(model, x)
    handle.remove()
    assert torch.equal(logits(model, x, "head_ablate:layers=1"), reference)


@pytest.mark.parametrize("tid, name, extra", TABLE, ids=[m[0] for m in TABLE])
def test_a_zeroed_table_is_the_model_without_one(tid: str, name: str, extra: dict) -> None:
    """pe_zero removes every positional code: the table, and on a model with a rope too every rotation plane."""
    model, x = build(name, extra), images()
    without_rotation = "rope_planes" if "rope.tables" in model.hook_points.points else ""
    with torch.no_grad():
        zeroed = logits(model, x, "pe_zero")
        model.model.pos_embed.zero_()
        assert torch.equal(zeroed, logits(model, x, without_rotation))


@pytest.mark.parametrize("tid, name, extra", APE_ONLY, ids=[m[0] for m in APE_ONLY])
def test_pe_zero_is_the_library_forward_with_a_zeroed_table(tid: str, name: str, extra: dict) -> None:
    """The oracle is timm's own forward, not the adapter's pass: every prefix token (the distillation token of
    DeiT-distilled included) goes through the edited path as through timm's ``_pos_embed``."""
    model, x = build(name, extra), images()
    with torch.no_grad():
        zeroed = logits(model, x, "pe_zero")
        model.model.pos_embed.zero_()
        torch.testing.assert_close(zeroed, model.model.eval()(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize("tid, name, extra", APE_ONLY, ids=[m[0] for m in APE_ONLY])
def test_a_resampled_table_agrees_with_timms_resample(tid: str, name: str, extra: dict) -> None:
    """pe_resample at 6x5 against the same model built for 48x40 px with timm's resample of its table."""
    model, x = build(name, extra), torch.randn(2, 3, 48, 40)
    big = build(name, extra, seed=9, img_size=(48, 40))
    m = model.model
    prefix = 0 if m.no_embed_class else m.num_prefix_tokens
    state = dict(m.state_dict(), pos_embed=resample_abs_pos_embed(m.pos_embed, [6, 5], [4, 4], prefix))
    big.model.load_state_dict(state)
    assert torch.equal(logits(model, x, "pe_resample:grid=6x5"), logits(big, x))


@pytest.mark.parametrize("tid, name, extra", ROPE, ids=[m[0] for m in ROPE])
def test_a_rope_model_at_another_grid_is_timms_own_dynamic_size_pass(tid: str, name: str, extra: dict) -> None:
    """pe_resample at 6x5 (and 3x3) against the same weights built with dynamic_img_size, run by timm on 48x40 px:
    its rotary table for that grid (and, with a table, the table resampled), bit for bit."""
    model = build(name, extra)
    dynamic = build(name, extra, seed=9, dynamic_img_size=True)
    dynamic.model.load_state_dict(model.model.state_dict())
    for rows, cols in ((6, 5), (3, 3)):
        x = torch.randn(2, 3, rows * 8, cols * 8, generator=torch.Generator().manual_seed(2))
        with torch.no_grad():
            own = dynamic.model(x)
        resampled = logits(model, x, f"pe_resample:grid={rows}x{cols}")
        assert torch.equal(resampled, own), (rows, cols)
        assert not torch.allclose(resampled, logits(model, x, f"pe_resample:grid={rows}x{cols}+rope_planes"))


@pytest.mark.parametrize("tid, name, extra", ROPE, ids=[m[0] for m in ROPE])
def test_rope_with_every_plane_removed_is_the_model_without_rotation(tid: str, name: str, extra: dict) -> None:
    """Every plane removed against timm's own forward with the rope turned off (each block given ``rope=None``)."""
    model, x = build(name, extra), images()
    m = model.model
    edited = logits(model, x, "rope_planes")
    m.rope_mixed = False if hasattr(m, "rope_mixed") else None
    model._rope = lambda alpha: None  # the adapter's table builder, off: blocks run without rotation
    assert torch.equal(edited, logits(model, x))


@pytest.mark.parametrize("tid, name, extra", ROPE, ids=[m[0] for m in ROPE])
def test_the_planes_name_their_axis_and_speed(tid: str, name: str, extra: dict) -> None:
    model = build(name, extra)
    planes = model.hook_points.planes
    hd = 64 // 4
    assert sorted(c for p in planes for c in p.channels) == list(range(hd))
    if tid == "rope_mixed":
        assert {p.axis for p in planes} == {None}
        return
    for axis in ("x", "y"):
        assert sorted(p.freq for p in planes if p.axis == axis) == list(range(hd // 4))
    # an x plane's angle does not change down a column: removing every x plane leaves rows telling slots apart only
    cos, sin = model._rope(1.0).chunk(2, dim=-1)[::-1]
    angle = torch.atan2(sin, cos).view(4, 4, hd)
    for p in planes:
        c = p.channels[0]
        varies = (angle[:, :, c] - angle[:1, :, c]).abs().max() > 0  # along the rows
        assert varies == (p.axis == "y"), p


def test_edits_a_timm_model_cannot_take_are_one_line() -> None:
    ape, rope = build("vit_small_patch16_224", {}), build("vit_small_patch16_rope_224", {})
    x = images()
    cases = [
        (ape, x, "rope_planes", "rope_planes acts at rope.tables, which timm:ape does not have; it has: pe.table"),
        (rope, x, "pe_resample:rope_positions=interpolate", "pe_resample:rope_positions=interpolate is for peanchor's"),
        (ape, x, "pe_resample:grid=6x6", "images of 32x32 px give a 4x4 patch grid; this pass expects 6x6 (48x48 px)"),
        (ape, x, "head_ablate:layers=2", "head_ablate:layers=2: the model has 2 blocks (0-1)"),
    ]
    for model, images_, spec, message in cases:
        with pytest.raises(ConfigError) as e:
            logits(model, images_, spec)
        assert message in str(e.value) and "\n" not in str(e.value), spec
    # pe_zero removes a rotation as it removes a table: every plane the identity
    assert torch.equal(logits(rope, x, "pe_zero"), logits(rope, x, "rope_planes"))


def test_a_distilled_deits_started_passes_equal_separate_passes() -> None:
    """The distillation token goes through the started passes of a dose sweep (Start) as through the full ones."""
    model = build("deit_small_distilled_patch16_224", {}, depth=3)
    assert model.num_prefix == 2
    check_started_passes(model, images(), model.model.blocks)
