"""The result files' versions and layouts (``peanchor.results.schema``): analysis.json 3 holds its lens records under
``lenses``, version 2 (the records at the top level) still reads as the same measurements and is written back as 3,
a lens not installed here survives both, and results.json keeps its layout."""

from __future__ import annotations

import json
import warnings

import pytest

from peanchor.core.errors import SchemaError
from peanchor.lenses import LENSES, UnknownLensRecord
from peanchor.results.records import (
    ANALYSIS_SCHEMA_VERSION,
    RESULTS_SCHEMA_VERSION,
    CellId,
    ModelResult,
    Results,
    TrainSummary,
    read_analysis,
    read_results,
    to_json_dict,
    write_analysis,
    write_results,
)
from peanchor.results.schema import READABLE, nests_lenses
from tests.helpers.paths import TEST_DATA

DATA = TEST_DATA
ANALYSES = sorted(p for p in DATA.glob("*.json") if json.loads(p.read_text()).get("schema") == "peanchor.analysis")
ENTROPY = {"normal": [1.5, None], "rpi": [1.25, 2.0], "queries": "patches"}  # a plug-in's record, not installed here


def _v2_layout(doc: dict) -> dict:
    """A version-3 document in version 2's layout, written out by hand: the records at the top level."""
    out = {k: v for k, v in doc.items() if k != "lenses"}
    return {**out, **doc["lenses"], "schema_version": 2}


def test_the_versions():
    assert ANALYSES, "tests/data holds analysis files"
    assert (ANALYSIS_SCHEMA_VERSION, RESULTS_SCHEMA_VERSION) == (3, 2)
    assert READABLE == {"peanchor.analysis": (2, 3), "peanchor.results.records": (2,)}
    assert [nests_lenses("peanchor.analysis", v) for v in (2, 3)] == [False, True]


@pytest.mark.parametrize("path", ANALYSES, ids=[p.name for p in ANALYSES])
def test_every_stored_analysis_reads_and_writes_back_the_same_measurements(path, tmp_path):
    doc = json.loads(path.read_text())
    first = read_analysis(path)
    written = json.loads(write_analysis(first, tmp_path).read_text())
    assert written["schema_version"] == 3 and set(written["lenses"]) == set(first.lenses)
    assert not set(written) & set(LENSES)  # no record left at the top level
    again = read_analysis(tmp_path)
    assert again == first  # every measurement, setting and source, as the dataclasses compare them
    if doc["schema_version"] == 2:  # the same numbers as the file holds, record by record
        assert written["lenses"] == {name: doc[name] for name in written["lenses"]}
        assert _v2_layout(written) | {"schema_version": 2} == doc


def test_a_lens_not_installed_here_round_trips_byte_for_byte_in_the_new_layout(tmp_path):
    result = read_analysis(ANALYSES[0])
    with pytest.warns(UserWarning, match="'attention_entropy', a lens not installed here"):
        result.lenses["attention_entropy"] = UnknownLensRecord(ENTROPY)
        first = write_analysis(result, tmp_path / "a").read_bytes()
        back = read_analysis(tmp_path / "a")
    assert back.lenses["attention_entropy"] == UnknownLensRecord(ENTROPY)
    assert back.unknown_lenses == ["attention_entropy"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert write_analysis(back, tmp_path / "b").read_bytes() == first
        old = tmp_path / "old" / "analysis.json"  # the same file in version 2's layout reads to the same record
        old.parent.mkdir()
        old.write_text(json.dumps(_v2_layout(json.loads(first))))
        assert read_analysis(old) == back
        assert write_analysis(read_analysis(old), tmp_path / "c").read_bytes() == first


@pytest.mark.parametrize(("change", "message"), [
    (lambda d: {**d, "schema_version": 1}, "schema_version 1, but this peanchor reads versions 2, 3: rerun"),
    (lambda d: {**d, "schema_version": 4}, "schema_version 4, but this peanchor reads versions 2, 3"),
    (lambda d: {**d, "schema_version": True}, "schema_version True"),
    (lambda d: _v2_layout(d) | {"schema_version": 3}, "lenses: expected an object of lens records, got nothing"),
    (lambda d: {**d, "lenses": [1]}, "lenses: expected an object of lens records, got list"),
    (lambda d: {**d, "lenses": {**d["lenses"], "ssdc": {"normal": "high"}}}, r"lenses\.ssdc\.normal: Input should be"),
    (lambda d: {**d, "lenses": {k: v for k, v in d["lenses"].items() if k != "ssdc"}},
     "lenses is missing required key 'ssdc'"),
    (lambda d: {k: v for k, v in _v2_layout(d).items() if k != "ssdc"}, "the top level is missing required key 'ssdc'"),
])  # fmt: skip
def test_a_file_of_another_version_or_layout_is_one_line(change, message, tmp_path):
    doc = json.loads(write_analysis(read_analysis(ANALYSES[0]), tmp_path).read_text())
    (tmp_path / "analysis.json").write_text(json.dumps(change(doc)))
    with pytest.raises(SchemaError, match=message) as e:
        read_analysis(tmp_path)
    assert "\n" not in str(e.value)


def test_results_json_keeps_each_models_records_at_its_top_level(tmp_path):
    analysis = read_analysis(ANALYSES[0])
    cell = CellId(name="ape-s0", condition="ape", pe="ape", rpt=False, seed=0)
    model = ModelResult.from_analysis(analysis, cell, TrainSummary(val_acc=0.5), "runs/ape-s0")
    doc = json.loads(write_results(Results(models=[model]), tmp_path / "results.json").read_text())
    assert doc["schema_version"] == 2 and "lenses" not in doc["models"][0]
    assert doc["models"][0]["ssdc"] == to_json_dict(analysis.ssdc)
    assert read_results(tmp_path / "results.json").models[0].lenses == analysis.lenses
