"""What the audit reads of a transformers model (peanchor.adapters.hf_audit): the claim comes from the family and
the config (never from the hook points), the backend hands out that subject, and the signature tells apart the
configurations whose PE behaves differently (BEiT's bias layout and table), not sizes."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

from peanchor.adapters.backend import audit_subject, backend_of  # noqa: E402
from peanchor.adapters.hf_audit import claim, signature  # noqa: E402
from tests.adapters.test_hf_bias import VARIANTS  # noqa: E402
from tests.adapters.test_hf_bias import build as build_beit  # noqa: E402
from tests.adapters.test_hf_vit import HFViT, build  # noqa: E402

BEIT = {  # variant: (kind, also, prefix_rows, signature's bias part)
    "per_layer": ("relative bias", (), None, "shared_bias=False layer_bias=True table=False"),
    "shared": ("relative bias", (), None, "shared_bias=True layer_bias=False table=False"),
    "per_layer_ape": ("relative bias", ("learned table",), 1, "shared_bias=False layer_bias=True table=True"),
    "shared_and_per_layer": ("relative bias", (), None, "shared_bias=True layer_bias=True table=False"),
}


@pytest.mark.parametrize("variant", VARIANTS)
def test_beit_s_claim_and_signature_follow_its_config(variant: str) -> None:
    wrapped = build_beit(variant)
    said = claim(wrapped)
    kind, also, rows, bias = BEIT[variant]
    assert (said.kind, said.also, said.prefix_rows, said.num_prefix) == (kind, also, rows, 1)
    assert signature(wrapped) == f"beit registers=0 {bias}"
    subject = audit_subject(wrapped)
    assert subject.claim == said and subject.backend == "transformers" and subject.relative_bias
    assert subject.name == wrapped.pe_name.replace("hf:", "hf:beit:")


def test_a_beit_configured_without_bias_or_table_claims_no_pe() -> None:
    torch.manual_seed(0)
    wrapped = HFViT(T.BeitModel(T.BeitConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=64, image_size=32, patch_size=8)).eval())  # fmt: skip
    said = claim(wrapped)
    assert (said.kind, wrapped.pe_name, wrapped.pe_scalable) == ("none", "hf:none", False)
    assert "no relative position bias, absolute table=no" in said.source


@pytest.mark.parametrize(("name", "kind", "layout", "rows", "prefix", "said"), [
    ("DeiTForImageClassificationWithTeacher", "learned table", None, 2, 2, "deit registers=0"),
    ("Dinov2WithRegistersModel", "learned table", None, 1, 4, "dinov2_with_registers registers=3"),
    ("SiglipVisionModel", "learned table", None, 0, 0, "siglip registers=0"),
    ("DINOv3ViTModel", "rotary", "dinov3", None, 3, "dinov3 registers=2"),
])  # fmt: skip
def test_the_claim_of_each_family_is_read_off_its_config(name: str, kind: str, layout: str | None, rows: int | None,
                                                         prefix: int, said: str) -> None:  # fmt: skip
    wrapped = HFViT(build(name))
    got = claim(wrapped)
    assert (got.kind, got.layout, got.prefix_rows, got.num_prefix) == (kind, layout, rows, prefix)
    assert backend_of(wrapped).signature(wrapped) == said  # type: ignore[union-attr]
    assert audit_subject(wrapped).own_resample is not None or name == "DINOv3ViTModel"
