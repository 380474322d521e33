"""tools/tutorial_outputs.py: the seed-to-seed spread that sets the tutorial test's tolerance."""

from __future__ import annotations

import statistics

from tests.helpers.paths import ROOT, import_file


def _tool():
    return import_file(ROOT / "tools" / "tutorial_outputs.py", "tutorial_outputs")


def test_the_spread_is_the_std_over_seeds_of_each_printed_number() -> None:
    runs = [["+0.10", "0.500", "nan", "nan"], ["+0.20", "0.500", "nan", "0.3"], ["+0.40", "0.500", "nan", "0.1"]]
    got = _tool().spread(runs)
    assert got[0] == round(statistics.stdev([0.1, 0.2, 0.4]), 4)
    assert got[1] == 0.0  # the same in every seed
    assert got[2] == 0.0  # undefined in every seed: compared as undefined
    assert got[3] is None  # undefined in one seed only: not comparable
