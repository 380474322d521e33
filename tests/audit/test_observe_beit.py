"""The audit on BEiT's own forward (timm ``timm.models.beit``, transformers ``BeitModel``): healthy tiny BEiTs with an
absolute table beside their relative bias pass every check, and faults patched into the bias code the model calls
(the bias transposed, zeroed, gathered through a permuted index) fail the checks that read it, ``pe_identity``
(the bias its own attention adds, in the softmax of one token everywhere) and ``reference_parity`` (the weights
against softmax(q·kᵀ·scale + the declared bias)), with the measured values."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import peanchor.audit

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

from timm.models import beit as timm_beit
from transformers.models.beit import modeling_beit

SMALL = {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 4, "num_classes": 10}
TINY = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 64,
        "image_size": 32, "patch_size": 8, "num_labels": 5}  # fmt: skip
READERS = ["pe_identity", "reference_parity"]


def timm_model(**options: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    return timm.create_model("beit_base_patch16_224", pretrained=False, **{**SMALL, **options}).eval()


def hf_model(**options: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    model = T.BeitForImageClassification(T.BeitConfig(**{**TINY, **options})).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("relative_position_bias_table"):  # zero at init: nothing to see
                torch.nn.init.normal_(p, std=0.5)
    return model


def statuses(model: torch.nn.Module, checks: list[str] | None = None) -> dict[str, Any]:
    return {c.name: c for c in peanchor.audit(model, checks=checks).checks}


@pytest.mark.parametrize("build", [lambda: timm_model(use_abs_pos_emb=True),
                                   lambda: hf_model(use_shared_relative_position_bias=True,
                                                    use_absolute_position_embeddings=True)], ids=["timm", "hf"])
def test_a_beit_with_a_relative_bias_and_a_table_passes_every_check(build: Callable) -> None:
    seen = statuses(build())
    assert all(c.status in ("pass", "n/a") for c in seen.values()), [(c.name, c.message) for c in seen.values()]
    assert seen["pe_identity"].status == seen["reference_parity"].status == "pass"
    assert seen["no_hidden_position"].status == seen["alpha_behaves"].status == "pass"  # pe_zero removes the bias
    assert "pe_zero" in seen["alpha_behaves"].message and "bias" in seen["pe_identity"].message


def test_a_transformers_beit_configured_with_no_position_code_is_audited_as_one() -> None:
    """transformers' default ``BeitConfig`` has neither a bias nor a table: the claim says none, nothing raises."""
    seen = statuses(hf_model())
    assert all(c.status in ("pass", "n/a") for c in seen.values()), [(c.name, c.message) for c in seen.values()]
    assert "none" in seen["pe_identity"].message and seen["alpha_behaves"].status == "n/a"
    assert seen["no_hidden_position"].status == "pass"


def _faulty(kind: str, own: Callable[[Any], torch.Tensor]) -> Callable[[Any], torch.Tensor]:
    """The bias code ``own`` with one fault: its result transposed, zeroed, or its index table permuted."""

    def wrong(self: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
        if kind == "permuted_index":
            index = self.relative_position_index
            g = torch.Generator().manual_seed(0)
            self.relative_position_index = index.flatten()[torch.randperm(index.numel(), generator=g)].view_as(index)
            try:
                return own(self, *args, **kwargs)
            finally:
                self.relative_position_index = index
        bias = own(self, *args, **kwargs)
        return bias.transpose(-2, -1).contiguous() if kind == "transposed" else torch.zeros_like(bias)

    return wrong


@pytest.mark.parametrize("kind", ["transposed", "zeroed", "permuted_index"])
def test_a_fault_in_timm_beit_s_own_bias_fails_the_checks_that_read_it(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    model = timm_model()
    with torch.no_grad():
        for block in model.blocks:
            torch.nn.init.normal_(block.attn.relative_position_bias_table, std=0.5)
    assert all(c.status == "pass" for c in statuses(model, READERS).values())
    monkeypatch.setattr(timm_beit.Attention, "_get_rel_pos_bias",
                        _faulty(kind, timm_beit.Attention._get_rel_pos_bias))  # fmt: skip
    seen = statuses(model, READERS)
    assert seen["pe_identity"].status == "fail" and seen["pe_identity"].measured > 1e-2, seen["pe_identity"].message
    assert seen["reference_parity"].status == "fail", seen["reference_parity"].message
    if kind == "transposed":
        assert "transposed" in seen["reference_parity"].message
    if kind == "zeroed":
        assert "no bias added" in seen["reference_parity"].message


def test_a_fault_in_timm_beit_s_shared_bias_module_fails_the_checks_that_read_it(
        monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    model = timm_model(use_rel_pos_bias=False, use_shared_rel_pos_bias=True)
    with torch.no_grad():
        torch.nn.init.normal_(model.rel_pos_bias.relative_position_bias_table, std=0.5)
    monkeypatch.setattr(timm_beit.RelativePositionBias, "forward",
                        _faulty("transposed", timm_beit.RelativePositionBias.forward))  # fmt: skip
    seen = statuses(model, READERS)
    assert seen["pe_identity"].status == seen["reference_parity"].status == "fail"
    assert seen["pe_identity"].measured > 1e-2


@pytest.mark.parametrize("kind", ["transposed", "zeroed"])
def test_a_fault_in_transformers_beit_s_own_bias_fails_the_checks_that_read_it(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    model = hf_model(use_relative_position_bias=True)
    monkeypatch.setattr(modeling_beit.BeitRelativePositionBias, "forward",
                        _faulty(kind, modeling_beit.BeitRelativePositionBias.forward))  # fmt: skip
    seen = statuses(model, READERS)
    assert seen["pe_identity"].status == "fail" and seen["pe_identity"].measured > 1e-2, seen["pe_identity"].message
    assert seen["reference_parity"].status == "fail", seen["reference_parity"].message


def test_a_timm_beit_on_a_non_square_grid_passes_every_check() -> None:
    model = timm_model(img_size=(32, 48))
    with torch.no_grad():
        for block in model.blocks:
            torch.nn.init.normal_(block.attn.relative_position_bias_table, std=0.5)
    seen = statuses(model)
    assert all(c.status in ("pass", "n/a") for c in seen.values()), [(c.name, c.message) for c in seen.values()]
    assert "4x6" in seen["reference_parity"].message


def test_transformers_beit_s_bias_on_a_non_square_grid_is_a_finding_not_silenced() -> None:
    """transformers 5.25.0's ``BeitRelativePositionBias.forward`` reshapes the offset rows as (2w-1, 2h-1) and
    resizes them to (2h-1, 2w-1) even at the native window: on a non-square grid the bias it adds is not its
    table's gather (docs/audit.md). The audit fails it in both checks that read the bias."""
    model = hf_model(image_size=(32, 48), use_relative_position_bias=True)
    module = model.beit.layers[0].relative_position_bias
    index = module.generate_relative_position_index((4, 6))
    gather = module.relative_position_bias_table[index.view(-1)].view(25, 25, -1).permute(2, 0, 1)  # (H, T, T)
    own_gap = float((module((4, 6))[0] - gather).abs().max())
    seen = statuses(model, READERS)
    if own_gap < 1e-6:  # a transformers that fixed it: the audit passes
        assert all(c.status == "pass" for c in seen.values())
        return
    assert seen["pe_identity"].status == seen["reference_parity"].status == "fail"
    assert seen["pe_identity"].measured > 1e-2


def test_beit_s_verdicts_and_values_do_not_move_with_the_thread_count() -> None:
    model = timm_model(use_abs_pos_emb=True)
    with torch.no_grad():
        for block in model.blocks:
            torch.nn.init.normal_(block.attn.relative_position_bias_table, std=0.5)
    before = torch.get_num_threads()
    runs = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            runs.append({c.name: (c.status, c.measured) for c in peanchor.audit(model).checks})
    finally:
        torch.set_num_threads(before)
    for name, (status, value) in runs[0].items():
        other_status, other_value = runs[1][name]
        assert status == other_status, name
        assert (value is None) == (other_value is None), name
        if value is not None:
            assert abs(value - other_value) <= 1e-5, (name, value, other_value)  # rounding, far below every tolerance
