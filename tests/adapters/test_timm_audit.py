"""The audit subject of every timm backend (peanchor/adapters/timm_audit.py): timm's own forward as the native one,
the patch size, the bias flag, and timm's own resize held against ``pe_resample`` exactly where timm resizes the
table itself (a dynamic-size ViT with a table and no rope; a NaFlexViT stretching its table from the model's grid);
tiny random models, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")

from peanchor.adapters.backend import backend_of, wrap_model  # noqa: E402

VIT = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)  # a 4x4 grid
NAFLEX = dict(patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10, pos_embed_grid_size=(4, 4))
# (test id, timm name, extra kwargs, whether timm's own resize is held against pe_resample)
MODELS = [
    ("ape", "vit_small_patch16_224", {}, False),  # timm refuses other sizes: no own path
    ("ape_dynamic", "vit_small_patch16_224", {"dynamic_img_size": True}, True),
    ("rope_dynamic", "vit_small_patch16_rope_224", {"dynamic_img_size": True}, False),  # no table to resize
    ("none_dynamic", "vit_small_patch16_224", {"pos_embed": "none", "dynamic_img_size": True}, False),
    ("beit", "beit_base_patch16_224", {}, False),
    ("beit_ape", "beit_base_patch16_224", {"use_abs_pos_emb": True, "use_rel_pos_bias": False}, False),
    ("naflex", "naflexvit_base_patch16_gap", {}, True),
    ("naflex_par", "naflexvit_base_patch16_par_gap", {}, False),  # aspect-preserving: resizes and crops
    ("naflex_none", "naflexvit_base_patch16_gap", {"pos_embed": "none"}, False),
]


def subject(name: str, extra: dict) -> tuple[object, object]:
    if not timm.is_model(name):
        pytest.skip(f"{name} is not in timm {timm.__version__}")
    torch.manual_seed(0)
    raw = timm.create_model(name, pretrained=False, **dict(NAFLEX if name.startswith("naflex") else VIT, **extra))
    wrapped = wrap_model(raw.eval())
    return wrapped, backend_of(wrapped).audit_subject(wrapped)  # type: ignore[union-attr]


@pytest.mark.parametrize(("name", "extra", "resizes"), [m[1:] for m in MODELS], ids=[m[0] for m in MODELS])
def test_the_subject_runs_timms_own_forward_and_its_own_resize(name: str, extra: dict, resizes: bool) -> None:
    wrapped, s = subject(name, extra)
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(s.native_forward(x), wrapped.model(x))  # type: ignore[attr-defined]
    assert s.model is wrapped and s.backend == "timm" and s.name == wrapped.pe_name  # type: ignore[attr-defined]
    assert s.patch == 8 and s.scalable == wrapped.pe_scalable  # type: ignore[attr-defined]
    bias = any("relative_position_bias_table" in k for k, _ in wrapped.model.named_parameters())  # type: ignore
    assert s.relative_bias == bias  # type: ignore[attr-defined]
    assert (s.own_resample is not None) == resizes  # type: ignore[attr-defined]
    if resizes:  # timm's own path to another grid and pe_resample's are the same sums
        assert s.own_resample() < 1e-5  # type: ignore[attr-defined]
