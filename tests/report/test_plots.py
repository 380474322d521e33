"""The notebook figures (`peanchor.plot_*`): each draws into the caller's Axes (`ax=`) or lays a new figure out so
that `savefig` clips nothing, chooses panels by name, and gives every model a style of its own."""

from __future__ import annotations

import math

import io

import matplotlib
import pytest
import torch
from matplotlib.figure import Figure

import peanchor
from peanchor.data import normalize
from peanchor.settings.conditions import CONDITIONS
from peanchor.core.errors import DataError
from peanchor.report.figure_style import condition_styles

matplotlib.use("Agg")
PLOTS = (peanchor.plot_ssdc_per_layer, peanchor.plot_alpha_sweep, peanchor.plot_lenses, peanchor.plot_attention_heads)


@pytest.fixture(scope="module")
def result():
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=g)
    torch.manual_seed(0)
    model = peanchor.create_model("vit_micro", pe="ape", num_classes=4).eval()
    with torch.inference_mode():  # the model's own answers as labels: above chance, so its FS is defined
        labels = model(normalize(images, (0.5,) * 3, (0.25,) * 3)).argmax(dim=-1)
    return peanchor.analyze(model, images, labels, mean=(0.5,) * 3, std=(0.25,) * 3, alphas=[1.0, 0.0], batch_size=8,
                            progress=False, shifts=["jpeg:quality=10"])  # fmt: skip


def _outside(fig: Figure) -> float:
    """How far (inches) what ``fig`` draws reaches past its edges: what ``savefig`` would clip; 0 when nothing."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    drawn = fig.get_tightbbox(canvas.get_renderer())  # every drawn artist, in inches
    width, height = fig.get_size_inches()
    return max(0.0, -drawn.x0, -drawn.y0, drawn.x1 - width, drawn.y1 - height)


@pytest.mark.parametrize("plot", PLOTS, ids=[p.__name__ for p in PLOTS])
def test_a_new_figure_clips_no_label(plot, result) -> None:
    fig = plot({"a long model name": result, "another": result})
    assert _outside(fig) < 0.01
    fig.savefig(io.BytesIO(), format="png")  # and it still saves


def test_the_fixed_layout_alone_would_clip_wide_tick_labels(result) -> None:
    """The check above can fail: the report's fixed margins, with tick labels wider than they allow, clip."""
    from peanchor.report.figures import draw_ssdc_per_layer
    from peanchor.report.inputs import as_results

    fig = draw_ssdc_per_layer(as_results(result))
    fig.axes[0].set_ylim(-0.5, 0.5)
    fig.axes[0].set_yticks([-0.5, 0.5], ["-0.500000000001", "0.500000000001"])
    assert _outside(fig) > 0.1
    assert _outside(peanchor.plot_ssdc_per_layer(result)) < 0.01 and _outside(_wide(result)) < 0.01


def _wide(result) -> Figure:
    fig = peanchor.plot_ssdc_per_layer(result)
    fig.axes[0].set_ylim(-0.5, 0.5)
    fig.axes[0].set_yticks([-0.5, 0.5], ["-0.500000000001", "0.500000000001"])
    return fig


def test_every_plot_draws_into_the_callers_axes(result) -> None:
    fig = Figure()
    ax = fig.subplots()
    assert peanchor.plot_ssdc_per_layer({"mine": result}, ax=ax, panels=["rpi"]) is fig
    lines = [line for line in ax.get_lines() if line.get_label().startswith("mine")]
    assert len(lines) == 1 and list(lines[0].get_ydata()) == pytest.approx(result.ssdc.rpi)
    assert ax.get_legend() is not None and ax.get_title() == "SSDC per layer, under RPI (tokens shuffled)"
    two = Figure().subplots(1, 2)  # an array of Axes, as plt.subplots gives
    peanchor.plot_alpha_sweep(result, ax=two)
    assert [a.get_ylabel() for a in two] == ["ΔSSDC (under RPI)", "FS (jpeg)"]
    alphas = sorted(p.alpha for p in result.alpha_sweep if math.isfinite(p.fragility["jpeg"]))  # FS at chance: none
    assert sorted(two[1].get_lines()[0].get_xdata()) == alphas
    lenses = Figure().subplots(2, len(result.lenses))
    peanchor.plot_lenses(result, ax=lenses)
    assert lenses[1][0].get_title() == "SSDC, under RPI"
    heads = Figure().subplots()
    peanchor.plot_attention_heads({"mine": result}, ax=heads)
    assert heads.get_title() == "mine (n=1)" and heads.collections


def test_panels_and_axes_must_agree_in_one_line(result) -> None:
    ax = Figure().subplots()
    with pytest.raises(DataError) as e:
        peanchor.plot_ssdc_per_layer(result, ax=ax)
    assert str(e.value) == ("SSDC per layer: 2 panels (normal, rpi) but 1 Axes given: pass one Axes per panel, or "
                            "panels=['normal'] to draw fewer")  # fmt: skip
    with pytest.raises(DataError, match="no panel 'blur'; its panels are delta_ssdc, jpeg"):
        peanchor.plot_alpha_sweep(result, panels=["blur"])
    with pytest.raises(DataError, match="ax= must be a matplotlib Axes"):
        peanchor.plot_lenses(result, ax="left")
    fig = peanchor.plot_lenses(result, panels=["ssdc_rpi", "effective_rank"])
    assert [a.get_title() for a in fig.axes] == ["SSDC, under RPI", "effective rank, tokens in order"]


def test_models_that_are_not_conditions_each_get_their_own_style() -> None:
    names = [f"model {i}" for i in range(12)] + ["ape", "rope"]
    styles = condition_styles(names)
    combos = [(s["color"], str(s["linestyle"]), s["marker"]) for s in styles.values()]
    assert len(set(combos)) == len(names)
    spare = [styles[f"model {i}"] for i in range(9)]
    assert len({s["color"] for s in spare}) == 9  # the first nine differ in colour
    assert len({str(s["linestyle"]) for s in spare[:5]}) == len({s["marker"] for s in spare[:5]}) == 5
    taken = {c.style.colour for c in CONDITIONS.values() if c.style} | {"#444444", "#7f7f7f", "0.5"}
    assert not {s["color"] for s in spare} & taken  # no condition's colour, no grey
