"""Every check reads the model's own forward (:mod:`peanchor.audit.observe`): a fault patched into the code a timm or
transformers model really calls (an instance's ``_pos_embed``, a module function it imports, an embeddings'
``forward`` or ``interpolate_pos_encoding``, an attention's scale) changes what the check sees and fails it, and
healthy models pass every check on non-square grids. The printed lines are docs/audit.md's values (``-s``)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from peanchor.audit import audit

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

from tests.audit.checks.test_reference_parity import APE, EVA, ROPE, hf_model, timm_model  # noqa: E402
from tests.audit.test_adapters import HF  # noqa: E402

SQUARE_APE = ("vit_small_patch16_224", dict(img_size=32))


def failed(model: Any, label: str, check: str) -> None:
    report = audit(model)
    result = report[check]
    print(f"\nOWN {label} | {check} | {result.status} | {result.measured} | {result.message}")
    assert result.status == "fail" and "the check raised" not in result.message, report.table()


@pytest.mark.parametrize("spec", [APE, ROPE, EVA, ("vit_small_patch16_dinov3", dict(img_size=(24, 40))),
                                  ("vit_small_patch16_rope_mixed_224", dict(img_size=(40, 24))),
                                  ("vit_small_patch14_reg4_dinov2", dict(img_size=(28, 42), patch_size=7))],
                         ids=["ape", "rope", "eva", "dinov3", "mixed", "reg4"])  # fmt: skip
def test_healthy_timm_models_pass_every_check_on_non_square_grids(spec: tuple) -> None:
    report = audit(timm_model(spec))
    assert report.passed and all(c.status in ("pass", "n/a") for c in report.checks), report.table()


def test_the_checks_read_the_model_s_own_embedding() -> None:
    """The own forward's tokens entering block 0 equal timm's ``forward_features`` path up to block 0."""
    model = timm_model(APE)
    from peanchor.adapters.backend import audit_subject as subject_for

    obs = subject_for(model).observer
    images = torch.randn(2, 3, 24, 40)
    inner = model.model
    want = inner.norm_pre(inner._pos_embed(inner.patch_embed(images)))
    torch.testing.assert_close(obs.entry(images).tokens[0], want, rtol=0, atol=0)


def _timm_pos_embed(model: Any, change: Any) -> Any:
    inner = model.model
    real = inner._pos_embed
    inner._pos_embed = lambda x: change(inner, real(x))  # the instance's own method, as a fork would change it
    return model


def test_a_pos_embed_that_adds_no_table_fails_position_reaches_and_pe_identity() -> None:
    def without(inner: Any, x: torch.Tensor) -> torch.Tensor:
        return x - inner.pos_embed

    failed(_timm_pos_embed(timm_model(SQUARE_APE), without), "timm _pos_embed adds no table", "position_reaches")
    failed(_timm_pos_embed(timm_model(SQUARE_APE), without), "timm _pos_embed adds no table", "pe_identity")


def test_a_cls_token_without_its_row_fails_prefix_kept() -> None:
    """Megatron-LM PR #6260: the CLS token never gets its PE."""

    def cls_bare(inner: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:, :1] - inner.pos_embed[:, :1], x[:, 1:]], dim=1)

    failed(_timm_pos_embed(timm_model(SQUARE_APE), cls_bare), "timm CLS without its row", "prefix_kept")


def test_position_added_besides_the_table_fails_no_hidden_position() -> None:
    extra = torch.randn(1, 17, 64, generator=torch.Generator().manual_seed(3))  # (1, P + N, D): not pos_embed

    failed(_timm_pos_embed(timm_model(SQUARE_APE), lambda inner, x: x + extra), "timm a second code",
           "no_hidden_position")  # fmt: skip


def test_a_dynamic_resample_to_width_by_height_fails_axes_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """dinov2 PR #582 / torchtitan PR #4244: the table resampled to W x H on a non-square grid."""
    import timm.models.vision_transformer as vt

    real = vt.resample_abs_pos_embed

    def swapped(posemb: torch.Tensor, new_size: list[int], *args: Any, **kwargs: Any) -> torch.Tensor:
        p = kwargs.get("num_prefix_tokens", 1)
        h, w = new_size
        out = real(posemb, [w, h], *args, **kwargs)  # (1, P + W·H, D)
        rows = out[:, p:].reshape(1, w, h, -1).transpose(1, 2).reshape(1, h * w, -1)
        return torch.cat([out[:, :p], rows], dim=1)

    monkeypatch.setattr(vt, "resample_abs_pos_embed", swapped)
    failed(timm_model(("vit_small_patch16_224", dict(img_size=32, dynamic_img_size=True))), "timm W x H",
           "axes_in_order")  # fmt: skip


def test_a_rope_table_built_for_the_transposed_grid_fails_axes_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2541: H and W swapped in the rotary table (the x planes turn down the columns)."""
    model = timm_model(("vit_small_patch16_rope_224", dict(img_size=32)))
    rope = model.model.rope
    real = rope.get_embed

    def swapped(shape: list[int] | None = None) -> torch.Tensor:
        h, w = shape or model.model.patch_embed.grid_size
        return real(shape=[w, h]).reshape(w, h, -1).transpose(0, 1).reshape(h * w, -1)

    monkeypatch.setattr(rope, "get_embed", swapped)
    failed(model, "timm rope transposed", "axes_in_order")


def test_an_eager_path_that_scales_otherwise_fails_attention_paths() -> None:
    model = timm_model(SQUARE_APE)
    model.model.blocks[0].attn.scale *= 1.5  # the eager path's scale; SDPA uses its own
    failed(model, "timm eager scale", "attention_paths")


def _hf_embeddings(model: Any, change: Any) -> Any:
    embeddings = model._backbone.embeddings
    real = embeddings.forward
    embeddings.forward = lambda *a, **k: change(embeddings, real(*a, **k))  # what the model's forward calls
    return model


def test_transformers_embeddings_without_their_table_fail_position_reaches() -> None:
    def without(e: Any, x: torch.Tensor) -> torch.Tensor:
        return x - e.position_embeddings

    failed(_hf_embeddings(hf_model(HF["vit"]), without), "hf ViT adds no table", "position_reaches")


def test_transformers_cls_without_its_row_fails_prefix_kept() -> None:
    def cls_bare(e: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.cat([x[:, :1] - e.position_embeddings[:, :1], x[:, 1:]], dim=1)

    failed(_hf_embeddings(hf_model(HF["dinov2"]), cls_bare), "hf DINOv2 CLS without its row", "prefix_kept")


def test_transformers_position_besides_the_table_fails_no_hidden_position() -> None:
    extra = torch.randn(1, 17, 32, generator=torch.Generator().manual_seed(3))  # (1, P + N, D)

    failed(_hf_embeddings(hf_model(HF["clip"]), lambda e, x: x + extra), "hf CLIP a second code",
           "no_hidden_position")  # fmt: skip


def test_transformers_interpolation_to_width_by_height_fails_axes_in_order() -> None:
    model = hf_model(HF["vit"])
    embeddings = model._backbone.embeddings
    real = embeddings.interpolate_pos_encoding

    def swapped(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
        out = real(x, width, height)  # (1, 1 + W·H, D): the table of the transposed grid
        h, w = height // 8, width // 8
        rows = out[:, 1:].reshape(1, w, h, -1).transpose(1, 2).reshape(1, h * w, -1)
        return torch.cat([out[:, :1], rows], dim=1)

    embeddings.interpolate_pos_encoding = swapped
    failed(model, "hf ViT interpolation W x H", "axes_in_order")


NON_SQUARE = dict(image_size=(24, 40), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, patch_size=8)  # fmt: skip


def test_transformers_dinov3_with_a_non_square_native_grid_passes_every_check() -> None:
    report = audit(hf_model(lambda: T.DINOv3ViTModel(T.DINOv3ViTConfig(num_register_tokens=2, **NON_SQUARE))))
    assert report.passed, report.table()


def test_transformers_interpolation_of_a_non_square_table_is_a_finding_not_silenced() -> None:
    """transformers 5's ``interpolate_pos_encoding`` (ViT, DINOv2) reshapes the table to a square side: a model with
    a non-square native grid cannot run at another size (ViT) or at all (DINOv2 interpolates at every call).
    The audit fails it with the model's own error (docs/audit.md, "Findings"); what runs at the native grid
    passes."""
    vit = audit(hf_model(lambda: T.ViTModel(T.ViTConfig(**NON_SQUARE))))
    native = ("pe_identity", "position_reaches", "prefix_kept", "attention_paths", "no_hidden_position")
    assert all(vit[name].status == "pass" for name in native), vit.table()
    assert vit["reference_parity"].status == "fail" and "own forward raised RuntimeError" in vit["reference_parity"].message
    dinov2 = audit(hf_model(lambda: T.Dinov2Model(T.Dinov2Config(**NON_SQUARE))))
    print(f"\nFINDING transformers non-square tables | {vit['reference_parity'].message} | {dinov2['pe_identity'].message}")
    assert not dinov2.passed and "shape" in dinov2["pe_identity"].message


def test_the_shared_plain_pass_is_the_model_s_own_forward_of_those_very_images() -> None:
    from peanchor.adapters.backend import audit_subject as subject_for

    model = timm_model(APE)
    obs = subject_for(model).observer
    a, b = torch.randn(1, 3, 24, 40), torch.randn(1, 3, 24, 40)
    with torch.no_grad():
        first = obs.plain(a)
        assert obs.plain(a.clone()) is first  # the same images: the kept pass
        torch.testing.assert_close(obs.plain(b).logits, model.model(b), rtol=0, atol=0)  # others: a new pass
        torch.testing.assert_close(first.logits, model.model(a), rtol=0, atol=0)
