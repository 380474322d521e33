"""The audit of a timm NaFlexViT (peanchor/adapters/timm_naflex.py's subject and observer): every check passes on
healthy tiny NaFlexViTs (or says n/a with the reason), at square and non-square grids; faults injected into
NaFlex's own resize (timm #2542/#2543's bicubic where bilinear is declared; H and W swapped on a non-square grid)
fail named checks with their measured values."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")
naflexvit = pytest.importorskip("timm.models.naflexvit")

import peanchor
from peanchor.adapters.backend import wrap_model

SMALL = dict(patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)
VARIANTS = {
    "gap": ("naflexvit_base_patch16_gap", {}),
    "par_gap": ("naflexvit_base_patch16_par_gap", {}),
    "parfac_gap": ("naflexvit_base_patch16_parfac_gap", {}),
    "map": ("naflexvit_base_patch16_map", {}),
    "cls_bilinear": ("naflexvit_base_patch16_gap", dict(class_token=True, pos_embed_interp_mode="bilinear")),
    "none": ("naflexvit_base_patch16_gap", dict(pos_embed="none")),
}
#: (the table's grid, the size the model is wrapped at): square at its own grid, non-square at its own grid, and a
#: square table run at a non-square grid (NaFlex resizes it in every pass).
GRIDS = {"square": ((4, 4), None), "nonsquare": ((3, 5), None), "resized": ((4, 4), (32, 48))}


def build(variant: str, grids: str = "square", seed: int = 0, **overrides: object) -> object:
    name, extra = VARIANTS[variant]
    table, size = GRIDS[grids]
    torch.manual_seed(seed)
    raw = timm.create_model(name, pretrained=False, **SMALL, pos_embed_grid_size=table, **{**extra, **overrides})
    with torch.no_grad():
        for key, p in raw.named_parameters():
            if key.endswith(("pos_embed", "pos_embed_y", "pos_embed_x")):
                p.normal_(std=0.5)
    return wrap_model(raw.eval(), size)  # type: ignore[arg-type]


def statuses(report: object) -> dict[str, tuple[str, float | None, str]]:
    return {c.name: (c.status, c.measured, c.message) for c in report.checks}  # type: ignore[attr-defined]


@pytest.mark.parametrize("grids", GRIDS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_a_healthy_naflexvit_passes_every_check(variant: str, grids: str) -> None:
    seen = statuses(peanchor.audit(build(variant, grids)))
    failed = {k: v for k, v in seen.items() if v[0] not in ("pass", "n/a")}
    assert not failed, failed
    assert seen["rotary_relative"][0] == "n/a" and "no rotary" in seen["rotary_relative"][2]
    assert seen["reference_parity"][0] == "pass"
    if variant == "none":
        assert seen["resampling"][0] == "n/a"
    else:
        assert all(v[0] == "pass" for k, v in seen.items() if k != "rotary_relative"), seen


def test_the_claim_is_read_off_naflexs_own_attributes() -> None:
    subject = peanchor.audit(build("parfac_gap", "nonsquare"))
    message = statuses(subject)["pe_identity"][2]
    assert "pos_embed=factorized on (3, 5), resized bilinear antialias=False" in message
    assert "reg_tokens=4" in message


def bicubic_whatever_declared(original):  # the class of timm #2542/#2543: a mode other than the configured one
    def resize(self, x, grid_size):
        declared, self.pos_embed_interp_mode = self.pos_embed_interp_mode, "bicubic"
        try:
            return original(self, x, grid_size)
        finally:
            self.pos_embed_interp_mode = declared

    return resize


def test_a_table_resized_bicubic_where_bilinear_is_declared_fails_parity_and_resampling(monkeypatch) -> None:
    model = build("cls_bilinear", "nonsquare")
    original = naflexvit.NaFlexEmbeds._apply_learned_pos_embed
    monkeypatch.setattr(naflexvit.NaFlexEmbeds, "_apply_learned_pos_embed", bicubic_whatever_declared(original))
    seen = statuses(peanchor.audit(model))
    status, value, message = seen["reference_parity"]
    assert status == "fail" and value > 1e-2, seen["reference_parity"]
    assert "grid 3x7, the embedding" in message
    assert "resampled bicubic, antialiased where bilinear, antialiased is declared" in message
    assert seen["resampling"][0] == "fail" and seen["resampling"][1] > 1e-2, seen["resampling"]
    # the analysis interface follows the model's own code, so α and pe_zero still agree with it
    assert seen["alpha_behaves"][0] == "pass"


def swapped_axes(original):  # H and W swapped: the table resized to cols x rows and read as rows x cols
    def resize(self, x, grid_size):
        return original(self, x, [grid_size[1], grid_size[0]])

    return resize


@pytest.mark.parametrize("variant", ["gap", "par_gap"])
def test_h_and_w_swapped_on_a_non_square_grid_fails_axes_and_parity(variant: str, monkeypatch) -> None:
    model = build(variant, "nonsquare")
    original = naflexvit.NaFlexEmbeds._apply_learned_pos_embed
    monkeypatch.setattr(naflexvit.NaFlexEmbeds, "_apply_learned_pos_embed", swapped_axes(original))
    seen = statuses(peanchor.audit(model))
    assert seen["reference_parity"][0] == "fail" and seen["reference_parity"][1] > 1e-2, seen["reference_parity"]
    assert "the embedding" in seen["reference_parity"][2]
    assert seen["axes_in_order"][0] == "fail", seen["axes_in_order"]


@pytest.mark.parametrize("overrides", [
    {}, dict(pos_embed_interp_mode="bilinear", pos_embed_align_corners=True, pos_embed_ar_preserving=True),
    dict(pos_embed_antialias=False), dict(pos_embed="factorized"),
    dict(pos_embed="factorized", pos_embed_ar_preserving=True),
])  # fmt: skip
@pytest.mark.parametrize("grid", [(4, 4), (4, 6), (3, 4), (2, 8), (6, 6)])
def test_the_reference_table_is_the_declared_rule_timm_follows(overrides: dict, grid: tuple[int, int]) -> None:
    """peanchor's reference table (float64 F.interpolate from the declared options) equals NaFlex's own resize
    (its ``_apply_*_pos_embed`` on zeros) at every grid, the table's own included."""
    from peanchor.adapters.timm_naflex_observe import declared_resample, reference_table

    embeds = build("gap", "square", **overrides).model.embeds
    own = torch.zeros(1, grid[0] * grid[1], 64)
    learned = embeds.pos_embed_type == "learned"
    (embeds._apply_learned_pos_embed if learned else embeds._apply_factorized_pos_embed)(own, grid_size=list(grid))
    reference = reference_table(embeds, grid, *declared_resample(embeds))
    torch.testing.assert_close(own.double(), reference, rtol=0, atol=1e-5)
