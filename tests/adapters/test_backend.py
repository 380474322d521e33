"""The backend registry (peanchor/adapters/backend.py): wrap_model picks the backend that accepts a model, the audit
finds each wrapper's backend and its subject, a plug-in backend registers like the built-in ones, and the tiny BEiTs
of both libraries pass ``peanchor audit``."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from peanchor.adapters import BACKENDS, Backend, backend_of, wrap_model
from peanchor.adapters.backend import audit_subject
from peanchor.core.errors import ConfigError
from peanchor.models import create_model
from peanchor.models.interface import AnalysisInterface

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
            patch_size=8, num_labels=5)  # fmt: skip


def tiny_hf_beit(**options: Any) -> torch.nn.Module:
    torch.manual_seed(0)
    model = T.BeitForImageClassification(T.BeitConfig(**TINY, **options)).eval()
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith("relative_position_bias_table"):  # zero at init: nothing to see
                torch.nn.init.normal_(p, std=0.5)
    return model


def test_each_model_goes_to_the_backend_that_accepts_it() -> None:
    ours = create_model("vit_micro", pe="ape", num_classes=3, img_size=32, patch_size=8)
    assert wrap_model(ours) is ours and backend_of(ours).name == "peanchor"
    cases = {
        "timm": timm.create_model("deit_small_distilled_patch16_224", pretrained=False, **SMALL),
        "timm_beit": timm.create_model("beit_base_patch16_224", pretrained=False, **SMALL),
        "transformers": tiny_hf_beit(use_relative_position_bias=True),
    }
    for name, model in cases.items():
        wrapped = wrap_model(model.eval())
        assert isinstance(wrapped, AnalysisInterface) and backend_of(wrapped).name == name
        assert not wrapped.training
        assert backend_of(model) is None  # the raw model is no wrapper


def test_a_model_no_backend_accepts_is_one_line_naming_every_backend() -> None:
    with pytest.raises(ConfigError, match="cannot analyse a torch.nn.modules.linear.Linear") as refused:
        wrap_model(torch.nn.Linear(3, 3))
    line = str(refused.value)
    assert "\n" not in line and all(f"({name})" in line for name in ("peanchor", "timm", "timm_beit", "transformers"))
    with pytest.raises(ConfigError, match="cannot audit a torch.nn.modules.linear.Linear"):
        audit_subject(torch.nn.Linear(3, 3))


def test_the_subjects_claim_is_read_off_each_librarys_config() -> None:
    deit = audit_subject(wrap_model(timm.create_model("deit_small_distilled_patch16_224", pretrained=False, **SMALL)))
    assert (deit.claim.kind, deit.claim.num_prefix, deit.claim.prefix_rows, deit.backend) == (
        "learned table", 2, 2, "timm")
    beit = audit_subject(wrap_model(timm.create_model("beit_base_patch16_224", pretrained=False, **SMALL)))
    assert (beit.claim.kind, beit.claim.prefix_rows, beit.relative_bias) == ("relative bias", None, True)
    hf = audit_subject(wrap_model(tiny_hf_beit(use_shared_relative_position_bias=True)))
    assert (hf.claim.kind, hf.backend, hf.relative_bias) == ("relative bias", "transformers", True)
    assert "shared" in hf.claim.source


@pytest.mark.parametrize("library", ["timm", "timm_shared", "transformers", "transformers_shared"])
def test_healthy_tiny_beits_pass_the_audit(library: str) -> None:
    import peanchor.audit

    if library.startswith("timm"):
        torch.manual_seed(0)
        shared = dict(use_rel_pos_bias=False, use_shared_rel_pos_bias=True) if library.endswith("shared") else {}
        model = timm.create_model("beit_base_patch16_224", pretrained=False, **SMALL, **shared).eval()
    else:
        shared = "shared" if library.endswith("shared") else ""
        model = tiny_hf_beit(**{f"use_{shared + '_' if shared else ''}relative_position_bias": True})
    report = peanchor.audit(model)
    statuses = {c.name: c.status for c in report.checks}
    assert report.passed, [(c.name, c.status, c.message) for c in report.checks]
    assert statuses["pe_identity"] == "pass" and statuses["prefix_kept"] == "pass"


def test_a_plugin_backend_registers_as_the_built_in_ones_do() -> None:
    class Boxed(torch.nn.Module):
        def __init__(self, inner: AnalysisInterface) -> None:
            super().__init__()
            self.inner = inner

    @BACKENDS.register
    class BoxedBackend(Backend):
        name = "boxed_for_test"
        summary = "a boxed model"

        def accepts(self, model: Any) -> bool:
            return isinstance(model, Boxed)

        def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict | None = None) -> Any:
            return model.inner

        def wraps(self, wrapped: Any) -> bool:
            return False

        def audit_subject(self, wrapped: Any) -> Any:
            raise AssertionError("not asked")

    try:
        ours = create_model("vit_micro", pe="none", num_classes=3, img_size=32, patch_size=8)
        assert wrap_model(Boxed(ours)) is ours
    finally:
        del BACKENDS["boxed_for_test"]

    class Incomplete(Backend):
        name = "incomplete_for_test"
        summary = "nothing"

    with pytest.raises(ValueError, match="a backend implements accepts"):
        BACKENDS.register(Incomplete)
