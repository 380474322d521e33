"""The report's section on other resolutions, from a tiny synthetic results set: the cross-condition table (mean
over seeds with its interval), the figure, the sentences read from the intervals, and results without the record
(older files) reporting as before."""

from __future__ import annotations

import statistics

from peanchor.report import write_report
from peanchor.report.document import Heading
from peanchor.report.prose import build_report
from peanchor.report.resolution import plot_resolution, resolution_sentences, resolution_tables
from peanchor.results.records import results_from_dict
from tests.helpers.claim_results import PAPER_LIKE, claim_results
from tests.helpers.resolution_results import ACC, with_resolution

def results(seeds=(0, 1, 2), resolution: bool = True):
    doc = claim_results({c: PAPER_LIKE[c] for c in ACC}, seeds=seeds)
    return results_from_dict(with_resolution(doc) if resolution else doc)


def test_the_table_is_condition_by_size_with_the_mean_over_seeds_and_its_interval() -> None:
    acc, relative = resolution_tables(results())
    assert acc.header == ["condition", "n", "8 px (2×2)", "16 px (4×4), native", "24 px (6×6)"]
    rows = {row[0].split()[0]: row for row in acc.rows}
    assert list(rows) == ["none", "ape", "rope"]
    for condition, row in rows.items():
        assert row[1] == "3"
        for cell, values in zip(row[2:], zip(*ACC[condition])):  # a size's top-1 over the three seeds
            mean, sd = statistics.mean(values), statistics.stdev(values)
            assert cell.startswith(f"{mean:.3f} ± {sd:.3f} [")  # and the bootstrap CI of the mean
    ape = {row[0].split()[0]: row for row in relative.rows}["ape"]
    assert ape[3].startswith("1.000 ± 0.000")  # the native size relative to itself
    assert ape[4].startswith(f"{statistics.mean(a[2] / a[1] for a in ACC['ape']):.3f} ± ")


def test_one_seed_shows_its_analysis_s_own_interval() -> None:
    acc, _ = resolution_tables(results(seeds=(0,)))
    rope = {row[0].split()[0]: row for row in acc.rows}["rope"]
    assert rope[2] == "0.100 [0.090, 0.110]"


def test_the_sentences_name_the_collapse_below_the_model_without_a_pe() -> None:
    assert resolution_sentences(results()) == [
        "At 8 px, A(size)/A(native) is highest for none (ablated) (0.750) and lowest for rope (0.125).",
        "At 8 px, top-1 of rope lies wholly below that of none (ablated) by their intervals.",
        "At 24 px, A(size)/A(native) is highest for none (ablated) (0.800) and lowest for rope (0.150).",
        "At 24 px, top-1 of rope lies wholly below that of none (ablated) by their intervals.",
    ]


def test_the_report_renders_the_section_and_the_figure(tmp_path) -> None:
    paths = write_report(results(), tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "## Other resolutions" in md and "A(size)/A(native)" in md
    assert tmp_path / "figures" / "resolution.png" in paths
    fig = plot_resolution(results(), tmp_path / "again")
    assert fig is not None and fig.png.exists()


def test_results_without_the_record_report_as_before(tmp_path) -> None:
    old = results(resolution=False)
    assert resolution_tables(old) == [] and resolution_sentences(old) == []
    assert plot_resolution(old, tmp_path) is None
    report = build_report(old)
    assert not any(isinstance(b, Heading) and b.text == "Other resolutions" for b in report.blocks)
    paths = write_report(old, tmp_path / "old")
    assert not any(p.stem == "resolution" for p in paths)
