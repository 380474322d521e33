"""The console summary of an analysis shows every interval beside its number, the chance level, why an FS is
undefined, and the trends along α (on an older analysis given the new fields by hand: no model needed)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from peanchor.commands.analyze import summary_text
from peanchor.results.records import AlphaTrend, read_analysis

TEST_DATA = Path(__file__).parents[1] / "data"


def test_the_summary_shows_intervals_chance_and_undefined_fs():
    old = read_analysis(TEST_DATA / "analysis-v2-three-lenses.json")
    plain = summary_text(old, "old")
    assert "[" not in plain.splitlines()[1]  # an older file has no intervals: none are shown
    shift = next(iter(old.acc))
    ssdc = dataclasses.replace(old.ssdc, normal_ci=[[v - 0.1 for v in old.ssdc.normal], [v + 0.1 for v in old.ssdc.normal]],
                               rpi_ci=[[v - 0.2 for v in old.ssdc.rpi], [v + 0.2 for v in old.ssdc.rpi]], ci_level=0.95,
                               rpi_permutations=400)  # fmt: skip
    new = dataclasses.replace(
        old, lenses={**old.lenses, "ssdc": ssdc}, ci_level=0.95, clean_acc_ci=[0.1, 0.3], rpi_acc_ci=[0.05, 0.2],
        delta_ssdc_ci=[-0.5, 0.25], acc_ci={shift: [0.0, 0.2]}, chance=0.1,
        fragility={**old.fragility, shift: math.nan}, fragility_undefined={shift: "clean accuracy 0.200 [0.100, "
                                                                            "0.300] is not above chance (0.100) by its interval"},
        alpha_trends={"clean_acc": AlphaTrend(slope=0.5, ci=[0.25, 0.75], alphas=[1.0, 0.0], excluded={"0.5": "why"})},
    )  # fmt: skip
    text = summary_text(new, "new")
    assert f"top-1 clean {new.clean_acc:.3f} [0.100, 0.300], RPI {new.rpi_acc:.3f} [0.050, 0.200]" in text
    assert f"FS {shift}: undefined, clean accuracy 0.200 [0.100, 0.300] is not above chance" in text
    assert "(FS undef.)" in text and "(chance 0.100)" in text
    assert f"ΔSSDC (RPI, layer 1 - layer 0) {new.delta_ssdc:.3f} [-0.500, 0.250]  (95% intervals" in text
    assert f"{new.ssdc.rpi[0]:.2f} [{new.ssdc.rpi[0] - 0.2:.2f}, {new.ssdc.rpi[0] + 0.2:.2f}]" in text
    assert "(RPI: 400 distinct permutations; intervals 95%" in text
    assert "trend of clean_acc along α: slope 0.500 [0.250, 0.750] over 2 points; left out: α=0.5 (why)" in text
