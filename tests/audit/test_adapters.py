"""``peanchor audit`` on timm and transformers: every healthy family passes every check, and bugs injected by
editing a tiny random model's modules are failed by the check that names them (docs/audit.md lists the values
measured here)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest
import torch
from torch import nn

from peanchor.audit import CHECKS, audit

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

from peanchor.adapters import load_timm_model  # noqa: E402
from peanchor.adapters.hf_vit import HFViT  # noqa: E402

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10, init_values=1.0)
TIMM = {
    "ape": ("vit_small_patch16_224", {}),
    "ape_reg4": ("vit_small_patch14_reg4_dinov2", {}),
    "ape_no_embed_class": ("deit3_small_patch16_224", {}),
    "deit_distilled": ("deit_tiny_distilled_patch16_224", {}),
    "ape_dynamic": ("vit_small_patch16_224", {"dynamic_img_size": True}),
    "rope_axial": ("vit_small_patch16_rope_224", {}),
    "rope_mixed": ("vit_small_patch16_rope_mixed_224", {}),
    "mixed_rope_ape": ("vit_small_patch16_rope_mixed_ape_224", {}),
    "dinov3": ("vit_small_patch16_dinov3", {}),
}
HF_TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
               patch_size=8)  # fmt: skip
HF = {
    "vit": lambda: T.ViTForImageClassification(T.ViTConfig(num_labels=5, **HF_TINY)),
    "deit": lambda: T.DeiTModel(T.DeiTConfig(**HF_TINY)),
    "dinov2": lambda: T.Dinov2Model(T.Dinov2Config(**HF_TINY)),
    "dinov2_registers": lambda: T.Dinov2WithRegistersModel(T.Dinov2WithRegistersConfig(num_register_tokens=3, **HF_TINY)),
    "clip": lambda: T.CLIPVisionModel(T.CLIPVisionConfig(**HF_TINY)),
    "siglip": lambda: T.SiglipVisionModel(T.SiglipVisionConfig(**HF_TINY)),
    "dinov3": lambda: T.DINOv3ViTModel(T.DINOv3ViTConfig(num_register_tokens=2, **HF_TINY)),
}


def timm_model(family: str) -> nn.Module:
    name, extra = TIMM[family]
    if not timm.is_model(name):
        pytest.skip(f"{name} is not in timm {timm.__version__}")
    torch.manual_seed(0)
    return load_timm_model(name, **dict(SMALL, **extra))


def hf_model(family: str) -> HFViT:
    torch.manual_seed(0)
    model = HF[family]().eval()
    for key, param in model.named_parameters():  # a table and q, k large enough to matter
        if key.endswith(("position_embeddings", "position_embedding.weight", "q_proj.weight", "k_proj.weight")):
            nn.init.normal_(param, std=0.5)
    return HFViT(model)


@pytest.mark.parametrize("family", list(TIMM))
def test_every_healthy_timm_family_passes_every_check(family: str) -> None:
    report = audit(timm_model(family))
    assert report.passed and all(c.status in ("pass", "n/a") for c in report.checks), report.table()


@pytest.mark.parametrize("family", list(HF))
def test_every_healthy_transformers_family_passes_every_check(family: str) -> None:
    report = audit(hf_model(family))
    assert report.passed and all(c.status in ("pass", "n/a") for c in report.checks), report.table()


def _flip_rotate_half(model: nn.Module) -> nn.Module:
    """timm PR #2692: the rotate_half layout dropped (the blocks rotate interleaved pairs of a half-layout table)."""
    for block in model.model.blocks:
        block.attn.rotate_half = not block.attn.rotate_half
    return model


def _pad_stem(conv: nn.Conv2d) -> nn.Conv2d:
    """The patch embedding with one pixel of zero padding: the borders leak position."""
    new = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, padding=1)
    new.load_state_dict(conv.state_dict())
    return new


def _timm_padded(model: nn.Module) -> nn.Module:
    model.model.patch_embed.proj = _pad_stem(model.model.patch_embed.proj)
    return model


def _hf_padded(model: HFViT) -> HFViT:
    embed = model.model.vit.embeddings.patch_embeddings
    embed.projection = _pad_stem(embed.projection)
    return model


TIMM_BUGS = [
    ("rotate_half_dropped", "rope_axial", _flip_rotate_half, "rotary_relative"),
    ("rotate_half_dropped", "dinov3", _flip_rotate_half, "rotary_relative"),
    ("padded_stem", "ape", _timm_padded, "no_hidden_position"),
]


@pytest.mark.parametrize("bug,family,inject,check", TIMM_BUGS, ids=[f"{b[0]}-{b[1]}" for b in TIMM_BUGS])
def test_each_bug_injected_into_timm_is_failed_by_its_check(bug: str, family: str, inject: Callable, check: str) -> None:
    report = audit(inject(timm_model(family)))
    print(f"\nBUG timm {family} {bug} | {check} | {report[check].status} | {report[check].measured} | "
          f"{report[check].message}")  # fmt: skip
    assert report[check].status == "fail", report.table()


def test_dinov3_without_rotate_half_in_transformers_is_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    model = hf_model("dinov3")
    module = sys.modules[type(model.model.model.layer[0].attention).__module__]
    monkeypatch.setattr(module, "rotate_half", lambda x: x)  # the rotation's second term loses its half swap
    report = audit(model)
    print(f"\nBUG hf dinov3 rotate_half_dropped | rotary_relative | {report['rotary_relative'].status} | "
          f"{report['rotary_relative'].measured}")  # fmt: skip
    assert report["rotary_relative"].status == "fail", report.table()


def test_a_padded_stem_in_transformers_is_failed() -> None:
    report = audit(_hf_padded(hf_model("vit")))
    print(f"\nBUG hf vit padded_stem | no_hidden_position | {report['no_hidden_position'].status} | "
          f"{report['no_hidden_position'].measured}")  # fmt: skip
    assert report["no_hidden_position"].status == "fail", report.table()


def test_an_eager_path_that_scales_differently_in_transformers_is_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    model = hf_model("vit")
    module = sys.modules[type(model.model.vit.layers[0].attention).__module__]
    eager = module.eager_attention_forward
    monkeypatch.setattr(module, "eager_attention_forward",
                        lambda m, q, k, v, mask, scaling, **kw: eager(m, q, k, v, mask, scaling * 1.5, **kw))  # fmt: skip
    report = audit(model, checks=["attention_paths"])
    print(f"\nBUG hf vit eager_scale | attention_paths | {report['attention_paths'].status} | "
          f"{report['attention_paths'].measured}")  # fmt: skip
    assert report["attention_paths"].status == "fail", report.table()


def test_a_dynamic_img_size_path_that_swaps_height_and_width_is_failed(monkeypatch: pytest.MonkeyPatch) -> None:
    """dinov2 PR #582: height and width swapped when the table is resampled for a non-square input."""
    import timm.models.vision_transformer as vt

    real = vt.resample_abs_pos_embed
    monkeypatch.setattr(vt, "resample_abs_pos_embed",
                        lambda pe, new_size, *a, **kw: real(pe, list(new_size)[::-1], *a, **kw))  # fmt: skip
    report = audit(timm_model("ape_dynamic"), checks=["resampling"])
    print(f"\nBUG timm ape_dynamic hw_swapped | resampling | {report['resampling'].status} | "
          f"{report['resampling'].measured} | {report['resampling'].message}")  # fmt: skip
    assert report["resampling"].status == "fail", report.table()


def _interpolating_with(monkeypatch: pytest.MonkeyPatch, embeddings: nn.Module, **change: object) -> None:
    """The family's interpolate_pos_encoding with ``change`` forced on its F.interpolate call (on the class: the
    adapter's edits shadow the method per pass)."""
    cls = type(embeddings)
    own, real = cls.interpolate_pos_encoding, torch.nn.functional.interpolate

    def changed(*args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(torch.nn.functional, "interpolate", lambda *a, **kw: real(*a, **{**kw, **change}))
            return own(*args, **kwargs)

    monkeypatch.setattr(cls, "interpolate_pos_encoding", changed)


@pytest.mark.parametrize("family,change,case", [
    ("vit", {"mode": "bilinear"}, "bilinear where bicubic is documented (timm issue #2542)"),
    ("dinov2_registers", {"antialias": False}, "no antialiasing where it is documented (transformers PR #35411)"),
], ids=["vit-bilinear", "dinov2_registers-no_antialias"])  # fmt: skip
def test_an_interpolation_in_another_mode_in_transformers_is_failed(monkeypatch: pytest.MonkeyPatch, family: str,
                                                                     change: dict, case: str) -> None:  # fmt: skip
    model = hf_model(family)
    _interpolating_with(monkeypatch, model._backbone.embeddings, **change)
    report = audit(model, checks=["resampling"])
    print(f"\nBUG hf {family} {case} | resampling | {report['resampling'].status} | {report['resampling'].measured} "
          f"| {report['resampling'].message}")  # fmt: skip
    assert report["resampling"].status == "fail", report.table()


def test_dinov3_configured_but_axial_built_is_failed() -> None:
    """timm PR #2692: rope_type='dinov3' silently replaced by the axial layout, and rotate_half dropped with it."""
    model = timm_model("dinov3")
    model.model.rope = timm_model("rope_axial").model.rope  # the axial module where the config asked for DINOv3
    report = audit(model)
    print(f"\nBUG timm dinov3_built_axial | pe_identity | {report['pe_identity'].status} | "
          f"{report['pe_identity'].message} | rotary_relative {report['rotary_relative'].measured}")  # fmt: skip
    assert report["pe_identity"].status == "fail" and "measured axial" in report["pe_identity"].message
    assert report["rotary_relative"].status == "fail"


def test_a_check_the_model_breaks_on_fails_and_the_others_still_run() -> None:
    model = timm_model("ape")
    model.model.blocks[0].attn.forward = lambda *a, **kw: (_ for _ in ()).throw(RuntimeError("boom\nsecond line"))
    report = audit(model)
    assert all(c.status == "fail" for c in report.checks if c.name == "attention_paths")
    assert report["attention_paths"].message == "the check raised RuntimeError: boom"
    assert len(report.checks) == len(CHECKS)


def test_registers_dropped_without_a_table_are_failed() -> None:
    """timm PR #2676: with pos_embed='none' the register tokens were dropped (num_prefix_tokens still counts them)."""
    torch.manual_seed(0)
    model = load_timm_model("vit_small_patch14_reg4_dinov2", **SMALL, pos_embed="none")
    assert audit(model).passed
    model.model.reg_token = None
    report = audit(model)
    print(f"\nBUG timm reg4_no_pos_embed registers_dropped | prefix_kept | {report['prefix_kept'].status} | "
          f"{report['prefix_kept'].message}")  # fmt: skip
    assert report["prefix_kept"].status == "fail"
