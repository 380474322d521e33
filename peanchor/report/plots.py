"""The report's figures for a notebook: drawn from one analysis or several, returned as matplotlib figures.

Each function takes one :class:`~peanchor.results.AnalysisResult`, a list of them, a mapping ``name → result``
(or ``name → [results over seeds]``, drawn as their mean with a ±1 std band), or a whole
:class:`~peanchor.results.Results`, and returns the ``matplotlib.figure.Figure`` that ``peanchor report`` draws
(the drawing lives in :mod:`peanchor.report.figures` and :mod:`peanchor.report.lenses`; nothing is written to
disk). A name that is one of the study's conditions (``ape``, ``rope``, ...) gets that condition's style.

Example::

    fig = plot_ssdc_per_layer({"mine": read_analysis("runs/x/analysis"), "theirs": result})
    fig.savefig("ssdc.png")

Imports: matplotlib, :mod:`peanchor.report` (figures, lenses), :mod:`peanchor.results`, :mod:`peanchor.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Union

from matplotlib.figure import Figure

from peanchor.errors import DataError
from peanchor.report.figures import draw_alpha_sweep, draw_ssdc_per_layer
from peanchor.report.lenses import draw_attention_heads, draw_lenses_per_layer
from peanchor.results import AnalysisResult, CellId, ModelResult, Results, SweepRow, TrainSummary

__all__ = ["as_results", "plot_alpha_sweep", "plot_attention_heads", "plot_lenses", "plot_ssdc_per_layer"]

Analyses = Union[
    AnalysisResult, Sequence[AnalysisResult], Mapping[str, "AnalysisResult | Sequence[AnalysisResult]"], Results
]


def _name(result: AnalysisResult, index: int) -> str:
    source = result.source or {}
    return str(source.get("condition") or result.model.pe or "model") + f" #{index + 1}"


def as_results(analyses: Analyses) -> Results:
    """One or several analyses as a :class:`Results` (each name is a condition, each list entry a seed)."""
    if isinstance(analyses, Results):
        return analyses
    if isinstance(analyses, AnalysisResult):
        analyses = [analyses]
    if isinstance(analyses, Mapping):
        groups = {str(k): [v] if isinstance(v, AnalysisResult) else list(v) for k, v in analyses.items()}
    elif isinstance(analyses, Sequence):
        groups = {_name(r, i): [r] for i, r in enumerate(analyses)}
    else:
        raise DataError(f"cannot plot a {type(analyses).__name__}: expected AnalysisResult(s), a mapping name → "
                        "result(s), or Results")  # fmt: skip
    models, sweep = [], []
    for condition, results in groups.items():
        for seed, result in enumerate(results):
            if not isinstance(result, AnalysisResult):
                raise DataError(f"{condition!r}: expected an AnalysisResult, got a {type(result).__name__}")
            name = f"{condition}-s{seed}"
            cell = CellId(name=name, condition=condition, pe=result.model.pe or "", rpt=False, seed=seed)
            models.append(ModelResult.from_analysis(result, cell, TrainSummary(), run_dir=""))
            sweep += [SweepRow.from_point(p, name, condition, seed) for p in result.alpha_sweep]
    if not models:
        raise DataError("nothing to plot: no analyses given")
    first = next(iter(groups.values()))[0]
    return Results(models=models, alpha_sweep=sweep, conditions=list(groups), shifts=dict(first.shifts),
                   seeds=sorted({m.seed for m in models}), img_size=None)  # fmt: skip


def _draw(draw: Callable[[Results], Figure | None], analyses: Analyses, missing: str) -> Figure:
    fig = draw(as_results(analyses))
    if fig is None:
        raise DataError(f"nothing to plot: {missing}")
    return fig


def plot_ssdc_per_layer(analyses: Analyses) -> Figure:
    """SSDC per layer, tokens in order and under RPI (one line per name; a single result's band is its spread
    over RPI draws or its bootstrap CI)."""
    return _draw(draw_ssdc_per_layer, analyses, "no models")


def plot_alpha_sweep(analyses: Analyses, paper_reference: bool = False) -> Figure:
    """ΔSSDC under RPI and the Fragility Score of each shift against α; ``paper_reference`` adds the paper's APE
    sweep (ImageNet-100, 224 px) as a dotted grey line, as the report does."""
    return _draw(lambda r: draw_alpha_sweep(r, paper_reference), analyses,
                 "no α sweep (alphas=() or a PE that α does not scale)")  # fmt: skip


def plot_lenses(analyses: Analyses) -> Figure:
    """SSDC, the position probe's held-out R² and the mean attention distance per layer, in order and under RPI."""
    return _draw(draw_lenses_per_layer, analyses, "no lens records")


def plot_attention_heads(analyses: Analyses) -> Figure:
    """Every head's mean attention distance against its layer, one panel per name."""
    return _draw(draw_attention_heads, analyses, "no attention distances (the model could not hand them out)")
