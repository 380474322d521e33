"""The report's dose-response sweeps: a figure per sweep (top-1, FS per shift, SSDC in order and under RPI against
the dose; ``peanchor.plot_dose_response`` with ``ax=`` and ``panels=``) and a section in the Markdown and the HTML,
drawn from the result files alone."""

from __future__ import annotations

import pytest
import torch

import peanchor
from peanchor.core.errors import DataError
from peanchor.report.dose_response import dose_panels, dose_table
from peanchor.report.inputs import as_results

STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
FAST = dict(alphas=(), batch_size=8, progress=False, shifts=["jpeg:quality=10"], lenses=["ssdc", "effective_rank"])
SWEEP = "rope_planes:freqs=none,0,0-1"


@pytest.fixture(scope="module")
def analyses() -> dict:
    g = torch.Generator().manual_seed(0)
    images, labels = torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(12) % 4
    out = {}
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = peanchor.create_model("vit_micro", pe="rope", num_classes=4).eval()
        out[f"rope-{seed}"] = peanchor.analyze(model, images, labels, sweeps=[SWEEP, "head_ablate:layers=0..1"],
                                               **STATS, **FAST)  # fmt: skip
    torch.manual_seed(0)
    out["plain"] = peanchor.analyze(peanchor.create_model("vit_micro", pe="rope", num_classes=4).eval(), images,
                                    labels, **STATS, **FAST)  # fmt: skip
    return out


def test_the_figure_draws_every_dose_of_the_chosen_sweep(analyses) -> None:
    result = analyses["rope-0"]
    fig = peanchor.plot_dose_response(result)
    assert [ax.get_title() for ax in fig.axes] == ["top-1", "Fragility Score, jpeg", "SSDC"]
    top1, _, ssdc = fig.axes
    assert [t.get_text() for t in top1.get_xticklabels()] == ["none", "0", "0-1"]
    (line, rpi) = top1.get_lines()
    assert list(line.get_ydata()) == [d.clean_acc for d in result.dose_sweeps[0].doses]
    assert list(rpi.get_ydata()) == [d.rpi_acc for d in result.dose_sweeps[0].doses]
    # layers 0 and 1 of a 2-block model, in order and under RPI
    drawn = {l.get_label(): list(l.get_ydata()) for l in ssdc.get_lines() if not l.get_label().startswith("_")}
    assert drawn["layer 1, under RPI"] == [d.lens("ssdc").rpi[1] for d in result.dose_sweeps[0].doses]
    assert len(drawn) == 4
    other = peanchor.plot_dose_response(result, sweep="head_ablate:layers=0,1", layers=[1], panels=["ssdc"])
    assert [t.get_text() for t in other.axes[0].get_xticklabels()] == ["0", "1"] and len(other.axes[0].get_lines()) == 3


def test_ax_draws_into_your_axes_and_the_names_are_lines(analyses) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    got = peanchor.plot_dose_response({k: analyses[k] for k in ("rope-0", "rope-1")}, ax=ax, panels=["top1"])
    assert got is fig
    labels = [l.get_label() for l in ax.get_lines()]
    assert labels == ["rope-0-s0: in order", "rope-0-s0: under RPI", "rope-1-s0: in order", "rope-1-s0: under RPI"]
    plt.close(fig)


def test_without_sweeps_or_with_an_unknown_one_it_is_one_line(analyses) -> None:
    with pytest.raises(DataError, match="^nothing to plot: no dose-response sweeps"):
        peanchor.plot_dose_response(analyses["plain"])
    with pytest.raises(DataError, match=r"^no dose-response sweep 'pe_zero:prefix=zero'; measured: rope_planes"):
        peanchor.plot_dose_response(analyses["rope-0"], sweep="pe_zero:prefix=zero")
    assert dose_panels(as_results(analyses["plain"])) == []


def test_the_report_has_a_section_per_sweep_in_markdown_and_html(analyses, tmp_path) -> None:
    paths = peanchor.write_report(analyses, tmp_path)
    md = (tmp_path / "report.md").read_text()
    html = (tmp_path / "report.html").read_text()
    assert "## Dose-response sweeps" in md and "Dose-response sweeps</h2>" in html
    assert (tmp_path / "figures" / "dose_response_1.png") in paths and (tmp_path / "figures" / "dose_response_2.png") in paths
    table = dose_table(as_results(analyses), SWEEP)
    assert table.header[:5] == ["model", "freqs", "top-1", "top-1 (RPI)", "FS jpeg"]
    assert [r[:2] for r in table.rows] == [[f"`rope-{s}-s0`", f"`{d}`"] for s in (0, 1) for d in ("none", "0", "0-1")]
    assert table.rows[0][2] == f"{analyses['rope-0'].clean_acc:.3f}"
    assert "| `rope-1-s0` | `0-1` |" in md
    # a report without sweeps has no such section
    peanchor.write_report({"plain": analyses["plain"]}, tmp_path / "plain")
    assert "Dose-response" not in (tmp_path / "plain" / "report.md").read_text()
