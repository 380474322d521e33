"""Results as tables: ``to_pandas`` gives analysis.csv's rows with numeric dtypes, ``compare`` a row per model,
``peanchor report PATH...`` one report from any mix of result files, and a notebook's view of an analysis."""

from __future__ import annotations

import csv
import math
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
import torch

import peanchor
from peanchor.core.errors import ConfigError, DataError
from peanchor.report.inputs import gather
from peanchor.results.records import ANALYSIS_CSV

pd = pytest.importorskip("pandas")

STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
FAST = dict(alphas=[1.0, 0.0], batch_size=8, progress=False, shifts=["jpeg:quality=10"])


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict:
    """Two analyses of micro models (ape, rope) on 12 random images, saved as a run directory would hold them."""
    g = torch.Generator().manual_seed(0)
    images, labels = torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(12) % 4
    out = {}
    root = tmp_path_factory.mktemp("tables")
    for pe in ("ape", "rope"):
        torch.manual_seed(0)
        model = peanchor.create_model("vit_micro", pe=pe, num_classes=4).eval()
        result = peanchor.analyze(model, images, labels, **STATS, **FAST)
        result.save(root / f"run-{pe}" / "analysis")
        out[pe] = result
    out["root"] = root
    return out


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_to_pandas_is_the_csv_with_numbers_and_nan(results) -> None:
    result, root = results["ape"], results["root"]
    frame = result.to_pandas()
    rows = _csv_rows(root / "run-ape" / "analysis" / ANALYSIS_CSV)  # the file, read with the csv module
    assert len(frame) == len(rows) and list(frame.columns) == list(rows[0])
    for column in ("layer", "head", "alpha", "severity", "value"):
        assert frame[column].dtype == "float64", column
    for (_, got), want in zip(frame.iterrows(), rows):
        assert got["metric"] == want["metric"]
        for column in ("layer", "head", "alpha", "severity", "value"):
            cell = want[column]
            if cell == "":  # not applicable: NaN, never ""
                assert math.isnan(got[column]), (want, column)
            else:
                assert got[column] == pytest.approx(float(cell), rel=1e-12, nan_ok=True)
        assert (got["shift"] if isinstance(got["shift"], str) else "") == want["shift"]
    ssdc = frame[frame.metric == "ssdc_rpi"].sort_values("layer")
    assert ssdc["value"].tolist() == pytest.approx(result.ssdc.rpi) and ssdc["layer"].tolist() == [0.0, 1.0]
    fs = frame[(frame.metric == "sweep_fragility") & (frame["shift"] == "jpeg")]
    assert dict(zip(fs.alpha, fs.value)) == pytest.approx({p.alpha: p.fragility["jpeg"] for p in result.alpha_sweep},
                                                          nan_ok=True)  # NaN where the clean accuracy is at chance
    low = frame[frame.metric == "clean_acc_ci_low"].value.tolist()
    assert low == [result.clean_acc_ci[0]] and frame[frame.metric == "chance"].value.tolist() == [0.25]
    assert frame.attrs["fragility_undefined"] == (result.fragility_undefined or {})  # why an FS is NaN


def test_the_csv_keeps_its_empty_cells(results, tmp_path) -> None:
    text = (results["root"] / "run-ape" / "analysis" / ANALYSIS_CSV).read_text()
    assert text.splitlines()[1] == f"clean_acc,,,1.0,,,{results['ape'].clean_acc!r}" and "None" not in text


def test_results_to_pandas_leads_each_row_with_its_model(results) -> None:
    grid = gather({"ape": results["ape"], "rope": [results["rope"], results["ape"]]})
    frame = grid.to_pandas()
    assert list(frame.columns[:5]) == ["model", "condition", "seed", "pe", "rpt"]
    assert frame["seed"].dtype == "int64" and frame["rpt"].dtype == "bool" and frame["value"].dtype == "float64"
    one = frame[frame.model == "rope-s1"].drop(columns=["model", "condition", "seed", "pe", "rpt"])
    alone = results["ape"].to_pandas()  # the second seed of "rope" is the ape analysis
    pd.testing.assert_frame_equal(one.reset_index(drop=True), alone.reset_index(drop=True))
    assert set(frame.condition) == {"ape", "rope"} and sorted(set(frame.model)) == ["ape-s0", "rope-s0", "rope-s1"]


def test_compare_gives_a_row_per_model_from_results_and_paths(results) -> None:
    root = results["root"]
    table = peanchor.compare({"ape": results["ape"], "rope": root / "run-rope", "again": root / "run-ape" / "analysis"})
    assert list(table.index) == ["ape", "rope", "again"] and (table.dtypes == "float64").all()
    for name, r in (("ape", results["ape"]), ("rope", results["rope"])):
        assert table.loc[name, "clean_acc"] == r.clean_acc
        assert table.loc[name, "fs_jpeg"] == pytest.approx(r.fragility["jpeg"], nan_ok=True, abs=0)
        assert table.loc[name, "clean_acc_ci_low"] == r.clean_acc_ci[0]
        assert table.loc[name, "delta_ssdc"] == r.ssdc.rpi[1] - r.ssdc.rpi[0]
        assert table.loc[name, "ssdc_max"] == max(r.ssdc.normal) and table.loc[name, "ssdc_max_rpi"] == max(r.ssdc.rpi)
        heads = r.attention_distance.manhattan.rpi
        mean = sum(sum(h) / len(h) for h in heads) / len(heads)
        assert table.loc[name, "attention_distance_mean_rpi"] == pytest.approx(mean, rel=1e-12)
    pd.testing.assert_series_equal(table.loc["again"], table.loc["ape"], check_names=False)  # NaNs in the same places
    by_path = peanchor.compare([root / "run-ape" / "analysis", root / "run-rope"])  # names from the paths
    assert list(by_path.index) == ["run-ape", "run-rope"]


def test_compare_takes_a_grid_as_one_row_per_model(results, tmp_path) -> None:
    from peanchor.results.records import write_results

    write_results(gather({"ape": results["ape"], "rope": results["rope"]}), tmp_path / "results.json")
    table = peanchor.compare({"grid": tmp_path, "mine": results["rope"]})
    assert list(table.index) == ["grid/ape-s0", "grid/rope-s0", "mine"]
    assert table.loc["grid/rope-s0", "fs_jpeg"] == pytest.approx(table.loc["mine", "fs_jpeg"], nan_ok=True, abs=0)
    assert table.loc["grid/rope-s0", "clean_acc_ci_high"] == results["rope"].clean_acc_ci[1]
    (tmp_path / "nothing").mkdir()
    with pytest.raises(DataError, match="no analysis.json or results.json here"):
        peanchor.compare({"empty": tmp_path / "nothing"})


def test_without_pandas_a_table_is_one_line(results, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pandas", None)  # import pandas now fails
    for call in (results["ape"].to_pandas, lambda: peanchor.compare([results["ape"]])):
        with pytest.raises(ConfigError) as e:
            call()
        assert str(e.value) == "tables need pandas: pip install 'peanchor[pandas]'"
    assert "clean_acc" in repr(results["ape"])  # the notebook view needs no pandas


class _Cells(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "tr":
            self.rows.append([])

    def handle_data(self, data: str) -> None:
        if self.rows and self.tags and self.tags[-1] in ("td", "th", "code"):
            self.rows[-1].append(data)

    def handle_endtag(self, tag: str) -> None:
        self.tags.pop()


def test_an_analysis_shows_a_short_repr_and_its_summary_table(results) -> None:
    r = results["rope"]
    text = repr(r)
    assert text.startswith("AnalysisResult(pe=rope, 2 layers, 4x4 grid; data tensors, 12 images; interventions "
                           "none;") and len(text) < 1000
    low, high = r.clean_acc_ci
    assert f"clean_acc={r.clean_acc:.3f} [{low:.3f}, {high:.3f}]" in text and f"ssdc_max_rpi={max(r.ssdc.rpi):.3f}" in text
    # a random model at chance: its FS is undefined, and the repr says why
    assert "fs_jpeg=n/a" in text and r.fragility_undefined["jpeg"] in text
    parser = _Cells()
    parser.feed(r._repr_html_())
    assert parser.tags == []  # every tag closed
    cells = {row[1]: row[2] for row in parser.rows}  # key → the value shown
    assert cells["clean_acc"] == f"{r.clean_acc:.3f} [{low:.3f}, {high:.3f}]" and cells["fs_jpeg"] == "n/a"
    assert cells["effective_rank_mean"] == f"{sum(r.lens('effective_rank').normal) / 2:.3f}"


# The report command run whole, twice: CI's; test_write_report_takes_analyses_and_paths and tests/report/test_mixing.py
# keep its path in the development loop.
@pytest.mark.slow
def test_report_cli_reads_any_mix_of_result_files(results, tmp_path, capsys) -> None:
    from peanchor.cli import main
    from peanchor.results.records import write_results

    root = results["root"]
    write_results(gather({"ape": results["ape"]}), tmp_path / "grid.json")
    code = main(["report", f"mine={root / 'run-rope' / 'analysis'}", str(tmp_path / "grid.json"), str(root / "run-ape"),
                 "--report-dir", str(tmp_path / "report")])  # fmt: skip
    assert code == 0, capsys.readouterr().err
    assert "3 models (mine, ape, run-ape)" in capsys.readouterr().out
    text = (tmp_path / "report" / "report.md").read_text()
    for condition in ("| mine | 1 |", "| ape | 1 |", "| run-ape | 1 |"):
        assert condition in text
    # one analysis directory: its report beside it (it was refused as "not a peanchor.results.records file")
    assert main(["report", str(root / "run-rope" / "analysis")]) == 0
    assert (root / "run-rope" / "analysis" / "report.html").is_file()
    # two models the report could not tell apart: one line naming both
    assert main(["report", f"a={root / 'run-ape'}", f"a={root / 'run-rope'}", "--report-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"peanchor: error: two models are both 'a' seed 0 ({root / 'run-ape'} and {root / 'run-rope'}): "
                   "name them (NAME=PATH on the command line, a mapping name → result in Python)")  # fmt: skip
    assert main(["report", str(tmp_path / "missing")]) == 2 and "does not exist" in capsys.readouterr().err


def test_write_report_takes_analyses_and_paths(results, tmp_path) -> None:
    paths = peanchor.write_report({"ape": results["ape"], "rope": results["root"] / "run-rope"}, tmp_path)
    assert tmp_path / "report.md" in paths and "| rope | 1 |" in (tmp_path / "report.md").read_text()


def test_dir_lists_the_lazy_api() -> None:
    names = dir(peanchor)
    for name in ("analyze", "compare", "write_report", "read_results", "plot_lenses", "load_model", "AnalysisPlan",
                 "__version__"):  # fmt: skip
        assert name in names and getattr(peanchor, name) is not None
    assert set(peanchor._LAZY) <= set(names) and "TYPE_CHECKING" not in names and "Any" not in names


def test_one_results_file_is_reported_as_it_is(results, tmp_path) -> None:
    from peanchor.results.records import read_results, write_results

    grid = gather({"ape": results["ape"], "rope": results["rope"]})
    grid.wall_seconds, grid.failed, grid.severity_table = 12.5, [], "tiny-imagenet-c"
    write_results(grid, tmp_path / "results.json")
    assert gather([tmp_path / "results.json"]) == read_results(tmp_path / "results.json")
    two = gather({"a": tmp_path / "results.json", "b": tmp_path / "results.json"})  # named: prefixed, shared kept
    assert [m.name for m in two.models] == ["a/ape-s0", "a/rope-s0", "b/ape-s0", "b/rope-s0"]
    assert two.severity_table == "tiny-imagenet-c" and two.wall_seconds is None
