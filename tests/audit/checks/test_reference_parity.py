"""``reference_parity`` and ``rotary_relative`` watch the model's own forward: faults injected into the code paths
timm and transformers models really call (module functions, an instance's methods) are caught, with the first
layer and site where the model parts from peanchor's reference and what differs; healthy models pass, on square
and non-square grids, at their own and at another resolution. The printed lines are docs/audit.md's catalogue
values (run with ``-s``)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from peanchor.audit import audit

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

from peanchor.adapters import load_timm_model  # noqa: E402
from peanchor.adapters.hf_vit import HFViT  # noqa: E402

from tests.audit.test_adapters import HF  # noqa: E402  (the tiny transformers families, built once there)

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10, init_values=1.0)
EVA = ("eva02_tiny_patch14_224", dict(img_size=(28, 42), patch_size=7, dynamic_img_size=True))
ROPE = ("vit_small_patch16_rope_224", dict(img_size=(24, 40), dynamic_img_size=True))
APE = ("vit_small_patch16_224", dict(img_size=(24, 40), dynamic_img_size=True))


def timm_model(spec: tuple[str, dict]) -> Any:
    torch.manual_seed(0)
    model = load_timm_model(spec[0], **dict(SMALL, **spec[1]))
    with torch.no_grad():  # a table large enough to matter
        if model.model.pos_embed is not None:
            model.model.pos_embed.normal_(std=0.5)
    return model


def hf_model(build: Any) -> HFViT:
    torch.manual_seed(0)
    model = build().eval()
    for key, param in model.named_parameters():
        if key.endswith(("position_embeddings", "position_embedding.weight", "q_proj.weight", "k_proj.weight")):
            torch.nn.init.normal_(param, std=0.5)
    return HFViT(model)


def caught(model: Any, label: str, checks: tuple[str, ...] = ("reference_parity", "rotary_relative"),
           dtype: str = "fp32") -> dict[str, Any]:  # fmt: skip
    report = audit(model, checks=list(checks), dtype=dtype)
    for c in report.checks:
        print(f"\nFAULT {label} | {c.name} | {c.status} | {c.measured} | {c.message}")
    return {c.name: c for c in report.checks}


@pytest.mark.parametrize("spec", [EVA, ROPE, APE, ("vit_small_patch16_dinov3", dict(img_size=(24, 40))),
                                  ("vit_small_patch16_rope_mixed_224", dict(img_size=(40, 24)))],
                         ids=["eva", "rope", "ape", "dinov3", "mixed"])  # fmt: skip
def test_healthy_timm_models_match_the_reference_on_non_square_grids(spec: tuple) -> None:
    report = audit(timm_model(spec), checks=["reference_parity", "rotary_relative"])
    assert all(c.status in ("pass", "n/a") for c in report.checks), report.table()
    assert report["reference_parity"].status == "pass", report.table()


def test_eva_with_its_rotation_dropped_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import timm.models.eva as eva

    def no_rotation(x: torch.Tensor, emb: torch.Tensor, half: bool = False) -> torch.Tensor:
        sin, cos = emb.chunk(2, -1)
        return (x * cos + x * sin).to(x.dtype)  # x·cos + x·sin: the rotation's partner channel forgotten

    monkeypatch.setattr(eva, "apply_rot_embed_cat", no_rotation)
    found = caught(timm_model(EVA), "eva rotation dropped")
    assert found["reference_parity"].status == "fail" and "block 0 attention: q·k differs" in found["reference_parity"].message
    assert found["rotary_relative"].status == "fail"


def test_eva_with_its_layout_flipped_is_caught_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm PR #2692 class: the table laid out for one pairing, the rotation applied in the other."""
    import timm.models.eva as eva

    real = eva.apply_rot_embed_cat
    monkeypatch.setattr(eva, "apply_rot_embed_cat", lambda x, emb, half=False: real(x, emb, half=not half))
    found = caught(timm_model(EVA), "eva layout flipped")
    assert found["reference_parity"].status == "fail"
    assert "rotary layout half vs the declared interleaved" in found["reference_parity"].message
    assert found["rotary_relative"].status == "fail"


def test_rope_tables_built_with_another_base_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """vggt-omega #35 class: the tables built with base 100 while the model declares 10000."""
    import timm.layers.pos_embed_sincos as pes

    real = pes.freq_bands
    monkeypatch.setattr(pes, "freq_bands", lambda num_bands, temperature=10000.0, step=2, device=None:
                        real(num_bands, 100.0, step, device))  # fmt: skip
    model = timm_model(EVA)
    assert float(model.model.rope.temperature) == 10000.0  # what the model declares
    found = caught(model, "eva base 100")
    assert found["reference_parity"].status == "fail"
    assert "the rotary table is" in found["reference_parity"].message


def test_xy_indexed_rope_with_height_and_width_swapped_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2541: H and W swapped for xy-indexed RoPE on non-square inputs."""
    model = timm_model(ROPE)
    rope = model.model.rope
    real = rope.get_embed

    def swapped(shape: list[int] | None = None) -> torch.Tensor:
        h, w = shape
        emb = real(shape=[w, h])  # (W·H, 2hd): the table of the transposed grid
        return emb.reshape(w, h, -1).transpose(0, 1).reshape(h * w, -1)

    monkeypatch.setattr(rope, "get_embed", swapped)
    found = caught(model, "rope xy swapped")
    assert found["reference_parity"].status == "fail"


def _instance_pos_embed(model: Any, fn: Any) -> None:
    inner = model.model
    inner._pos_embed = types.MethodType(fn, inner)


def test_cls_without_its_pe_is_caught() -> None:
    """Megatron-LM #6260: the CLS token never gets its position embedding."""
    model = timm_model(APE)
    real = type(model.model)._pos_embed

    def no_cls_pe(self: Any, x: torch.Tensor) -> torch.Tensor:
        out = real(self, x)
        return torch.cat([out[:, :1] - self.pos_embed[:, :1], out[:, 1:]], dim=1)

    _instance_pos_embed(model, no_cls_pe)
    found = caught(model, "ape cls without pe", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "prefix tokens" in found["reference_parity"].message


def test_table_added_twice_is_caught() -> None:
    model = timm_model(APE)
    real = type(model.model)._pos_embed

    def twice(self: Any, x: torch.Tensor) -> torch.Tensor:
        out = real(self, x)
        return out + self.pos_embed if out.shape[1] == self.pos_embed.shape[1] else out  # at the native grid

    _instance_pos_embed(model, twice)
    found = caught(model, "ape table twice", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "patch tokens" in found["reference_parity"].message


@pytest.mark.parametrize("fault", ["bilinear", "no_antialias", "indexed"])
def test_a_table_resampled_other_than_declared_is_caught(fault: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2542/#2543 (bilinear for bicubic), llama.cpp #17577 (no antialias), hipfire #324 (indexed)."""
    import timm.models.vision_transformer as vt

    real = vt.resample_abs_pos_embed

    def faulty(pe: torch.Tensor, new_size: Any, old_size: Any = None, num_prefix_tokens: int = 1, **kw: Any) -> Any:
        if fault == "bilinear":
            return real(pe, new_size, old_size, num_prefix_tokens, interpolation="bilinear", antialias=True)
        if fault == "no_antialias":
            return real(pe, new_size, old_size, num_prefix_tokens, antialias=False)
        rows, cols = old_size
        grid = pe[:, num_prefix_tokens:].reshape(1, rows, cols, -1)[:, : new_size[0], : new_size[1]]
        if grid.shape[1:3] != tuple(new_size):  # larger: the rows indexed modulo the table
            r = torch.arange(new_size[0]) % rows
            c = torch.arange(new_size[1]) % cols
            grid = pe[:, num_prefix_tokens:].reshape(1, rows, cols, -1)[:, r][:, :, c]
        return torch.cat([pe[:, :num_prefix_tokens], grid.flatten(1, 2)], dim=1)

    monkeypatch.setattr(vt, "resample_abs_pos_embed", faulty)
    found = caught(timm_model(APE), f"ape resample {fault}", checks=("reference_parity",))
    message = found["reference_parity"].message
    assert found["reference_parity"].status == "fail" and "grid 3x7" in message
    named = {"bilinear": "resampled bilinear, antialiased where", "no_antialias": "resampled bicubic where", "indexed": ""}
    assert named[fault] in message


def test_bf16_healthy_models_pass() -> None:
    assert audit(timm_model(EVA), checks=["reference_parity"], dtype="bf16").passed
    assert audit(hf_model(HF["dinov3"]), checks=["reference_parity"], dtype="fp16").passed


def test_a_silent_upcast_of_the_rotation_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2794 class: the rotation hands q and k back in float32 in a bf16 run (transformers DINOv3, where
    nothing casts them back)."""
    model = hf_model(HF["dinov3"])
    module = sys.modules[type(model._backbone.model.layer[0].attention).__module__]
    real = module.apply_rotary_pos_emb
    monkeypatch.setattr(module, "apply_rotary_pos_emb", lambda q, k, cos, sin, **kw: tuple(
        t.float() for t in real(q.float(), k.float(), cos.float(), sin.float())))  # fmt: skip
    found = caught(model, "hf dinov3 rotation upcast in bf16", checks=("reference_parity",), dtype="bf16")
    assert found["reference_parity"].status == "fail"


def test_an_unsupported_dtype_is_one_line() -> None:
    from peanchor.core.errors import ConfigError

    with pytest.raises(ConfigError, match="fp8.*fp32, bf16, fp16"):
        audit(timm_model(APE), dtype="fp8")




@pytest.mark.parametrize("family", list(HF))
def test_healthy_transformers_models_match_the_reference(family: str) -> None:
    report = audit(hf_model(HF[family]), checks=["reference_parity", "rotary_relative"])
    assert report["reference_parity"].status == "pass", report.table()
    assert report["rotary_relative"].status in ("pass", "n/a"), report.table()


def test_a_transformers_embeddings_forward_that_skips_cls_pe_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    model = hf_model(HF["dinov2"])
    embeddings = model._backbone.embeddings
    real = embeddings.forward

    def no_cls_pe(*args: Any, **kwargs: Any) -> torch.Tensor:
        out = real(*args, **kwargs)
        return torch.cat([out[:, :1] - embeddings.position_embeddings[:, :1], out[:, 1:]], dim=1)

    monkeypatch.setattr(embeddings, "forward", no_cls_pe)
    found = caught(model, "hf dinov2 cls without pe", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "prefix tokens" in found["reference_parity"].message


def test_dinov3_rotation_faults_in_transformers_are_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    model = hf_model(HF["dinov3"])
    module = sys.modules[type(model._backbone.model.layer[0].attention).__module__]
    monkeypatch.setattr(module, "rotate_half", lambda x: x)
    found = caught(model, "hf dinov3 rotate_half identity")
    assert found["reference_parity"].status == "fail" and found["rotary_relative"].status == "fail"


def test_dinov3_rope_table_kept_in_float32_in_a_bf16_run_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """dinov3 #243 class: the RoPE's dtype setting ignored (the table stays float32)."""
    model = hf_model(HF["dinov3"])
    rope_cls = type(model._backbone.rope_embeddings)
    real = rope_cls.forward
    monkeypatch.setattr(rope_cls, "forward", lambda self, pixels: tuple(t.float() for t in real(self, pixels)))
    found = caught(model, "hf dinov3 rope float32 in bf16", checks=("reference_parity",), dtype="bf16")
    assert found["reference_parity"].status == "fail" and "float32" in found["reference_parity"].message


def test_a_resample_skipped_between_equal_token_counts_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm PR #2737: resample_abs_pos_embed returned the table unchanged when the token count did not change."""
    import timm.models.vision_transformer as vt

    real = vt.resample_abs_pos_embed

    def early_return(pe: torch.Tensor, new_size: Any, old_size: Any = None, num_prefix_tokens: int = 1, **kw: Any):
        if old_size is not None and new_size[0] * new_size[1] == old_size[0] * old_size[1]:
            return pe  # the shortcut that assumed both grids square
        return real(pe, new_size, old_size, num_prefix_tokens, **kw)

    monkeypatch.setattr(vt, "resample_abs_pos_embed", early_return)
    model = timm_model(("vit_small_patch16_224", dict(img_size=32, dynamic_img_size=True)))  # 4x4, then 2x8
    found = caught(model, "ape equal-count resample skipped", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "grid 2x8" in found["reference_parity"].message


def test_prefix_tokens_dropped_without_a_table_are_caught() -> None:
    """timm PR #2676: with pos_embed='none' the CLS and register tokens were never concatenated."""
    model = timm_model(("vit_small_patch16_224", dict(pos_embed="none", reg_tokens=2, class_token=True)))
    _instance_pos_embed(model, lambda self, x: self.pos_drop(x.reshape(x.shape[0], -1, x.shape[-1])))
    found = caught(model, "no table, prefix dropped", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "16 tokens where 19 are declared" in found["reference_parity"].message


def test_a_loader_that_skipped_the_table_leaves_no_position() -> None:
    """lightning-pose #351: the checkpoint's position embeddings skipped, the table left at its zero init."""
    model = hf_model(HF["vit"])
    with torch.no_grad():
        model._backbone.embeddings.position_embeddings.zero_()
    found = caught(model, "hf vit table never loaded", checks=("position_reaches",))
    assert found["position_reaches"].status == "fail"


def test_a_model_already_in_bf16_is_audited_in_bf16_by_default() -> None:
    model = timm_model(ROPE).to(torch.bfloat16)
    report = audit(model)
    assert report.passed and "bfloat16" in report["reference_parity"].message, report.table()
    assert report["attention_paths"].status == "pass", report.table()  # the others: on a float32 copy
    assert next(model.parameters()).dtype == torch.bfloat16


def test_transformers_vit_interpolating_bilinear_is_caught_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2542 on the transformers side: the table interpolated bilinear where the family's code says bicubic."""
    model = hf_model(HF["vit"])
    embeddings = model._backbone.embeddings
    real, interpolate = embeddings.interpolate_pos_encoding, torch.nn.functional.interpolate

    def bilinear(*args: Any) -> torch.Tensor:
        with monkeypatch.context() as m:
            m.setattr(torch.nn.functional, "interpolate", lambda *a, **k: interpolate(*a, **{**k, "mode": "bilinear"}))
            return real(*args)

    monkeypatch.setattr(embeddings, "interpolate_pos_encoding", bilinear)
    found = caught(model, "hf vit bilinear", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail"
    assert "resampled bilinear where bicubic is declared" in found["reference_parity"].message


def test_transformers_dinov3_with_its_axes_swapped_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2541 on the transformers side: DINOv3's patch coordinates (row, col) handed over as (col, row)."""
    model = hf_model(HF["dinov3"])
    module = sys.modules[type(model._backbone.rope_embeddings).__module__]
    real = module.get_patches_center_coordinates
    monkeypatch.setattr(module, "get_patches_center_coordinates",
                        lambda h, w, dtype, device: real(h, w, dtype=dtype, device=device).flip(-1))  # fmt: skip
    found = caught(model, "hf dinov3 axes swapped", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "the axes swapped" in found["reference_parity"].message


def test_clip_with_its_position_ids_shifted_is_caught() -> None:
    model = hf_model(HF["clip"])
    ids = model._backbone.embeddings.position_ids
    ids.copy_(torch.roll(ids, 1, dims=-1))  # every token reads its neighbour's row
    found = caught(model, "hf clip position ids shifted", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "the embedding" in found["reference_parity"].message


def test_a_rotation_applied_to_the_prefix_tokens_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """clasp PR #7 class: the rotary embedding applied to the CLS token (and registers) too."""
    model = hf_model(HF["dinov3"])
    module = sys.modules[type(model._backbone.model.layer[0].attention).__module__]
    real = module.apply_rotary_pos_emb

    def with_prefix(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, **kw: Any):
        q, k = real(q, k, cos, sin)
        p = q.shape[-2] - cos.shape[-2]
        turn = lambda t: t[..., :p, :] * cos[-1] + module.rotate_half(t[..., :p, :]) * sin[-1]  # noqa: E731
        return (torch.cat([turn(q), q[..., p:, :]], dim=-2), torch.cat([turn(k), k[..., p:, :]], dim=-2))

    monkeypatch.setattr(module, "apply_rotary_pos_emb", with_prefix)
    found = caught(model, "hf dinov3 prefix rotated", checks=("reference_parity",))
    assert found["reference_parity"].status == "fail" and "the prefix tokens rotated too" in found["reference_parity"].message
