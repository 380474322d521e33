"""The intervals' fields in the result files: absent from older files, which still read (as None) and write back the
same; an older SSDC record with the Poisson bootstrap's intervals reads; a new analysis's fields round-trip."""

from __future__ import annotations

import json
from pathlib import Path

from peanchor.analysis.plan import AnalysisPlan
from peanchor.results.records import read_analysis, write_analysis

TEST_DATA = Path(__file__).parent / "data"
NEW_FIELDS = ("ci_level", "clean_acc_ci", "rpi_acc_ci", "delta_ssdc_ci", "acc_ci", "fragility_ci", "chance",
              "fragility_undefined", "alpha_trends")  # fmt: skip


def test_an_older_analysis_reads_without_intervals_and_writes_back_without_them(tmp_path):
    old = read_analysis(TEST_DATA / "analysis-v2-three-lenses.json")
    assert all(getattr(old, name) is None for name in NEW_FIELDS)
    assert old.ssdc.rpi_permutations is None and old.position_probe.r2_ci is None
    assert all(p.delta_ssdc_ci is None and p.fragility_undefined is None for p in old.alpha_sweep)
    plan = AnalysisPlan.from_result(old)
    assert plan.rpi_mode == "per_call" and plan.bootstrap == 0  # what that peanchor did: a permutation per call
    doc = json.loads(write_analysis(old, tmp_path).read_text())
    assert not set(NEW_FIELDS) & set(doc) and "rpi_mode" not in doc["settings"]
    assert read_analysis(tmp_path) == old


def test_an_older_ssdc_record_with_poisson_intervals_reads(tmp_path):
    doc = json.loads((TEST_DATA / "analysis-v2-three-lenses.json").read_text())
    layers = len(doc["ssdc"]["normal"])
    doc["ssdc"] |= {"normal_ci": [[0.1] * layers, [0.2] * layers], "rpi_ci": [[-0.1] * layers, [0.1] * layers],
                    "ci_level": 0.95}  # fmt: skip
    doc["settings"]["bootstrap"] = 100
    (tmp_path / "analysis.json").write_text(json.dumps(doc))
    r = read_analysis(tmp_path)
    assert r.ssdc.normal_ci == [[0.1] * layers, [0.2] * layers] and r.ssdc.ci_level == 0.95
