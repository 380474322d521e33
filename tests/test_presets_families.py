"""The ``families`` preset: the demo's scale over every PE family, with none, ape and rope as the baselines."""

from __future__ import annotations

from peanchor.cli import main
from peanchor.pe import PE_NAMES
from peanchor.presets.catalog import FAMILY_CONDITIONS, get_preset, resolve_config

FAMILIES = ("fourier", "factorized", "alibi", "liere", "comrope", "string", "rope_ape", "rope_dinov3")


def test_the_families_preset_is_the_demo_at_its_own_name_over_every_family():
    families, demo = resolve_config("families", {"model.pe": "liere"}), resolve_config("demo", {"model.pe": "liere"})
    assert families.preset == "families" and families.model.pe == "liere"
    assert (families.data, families.model, families.optim, families.train) == (demo.data, demo.model, demo.optim,
                                                                                demo.train)  # fmt: skip
    preset = get_preset("families")
    assert set(FAMILY_CONDITIONS) == {"none", "ape", "rope", *FAMILIES} and set(FAMILY_CONDITIONS) <= set(PE_NAMES)
    assert preset.conditions == FAMILY_CONDITIONS and preset.seeds == 2
    # the demo's analysis, plus top-1 at other resolutions around its 32 px (grids 2x2 to 6x6)
    assert preset.analysis == {**get_preset("demo").analysis, "resolutions": (16, 24, 40, 48)}
    assert preset.shifts == get_preset("demo").shifts


def test_reproduce_lists_every_family_and_seed(tmp_path, capsys):
    assert main(["reproduce", "--preset", "families", "--list", "--out", str(tmp_path / "f")]) == 0
    listed = capsys.readouterr().out
    for condition in FAMILY_CONDITIONS:
        for seed in (0, 1):
            assert f"--pe {condition} --seed {seed} " in listed
