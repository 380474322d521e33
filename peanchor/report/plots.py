"""The report's figures for a notebook: drawn from one analysis or several, returned as matplotlib figures.

Each function takes one :class:`~peanchor.results.records.AnalysisResult`, a list of them, a mapping ``name → result``
(or ``name → [results over seeds]``, drawn as their mean with a ±1 std band; a result may also be a path to a
result file, :func:`peanchor.report.inputs.gather`), or a whole :class:`~peanchor.results.records.Results`, and returns
the ``matplotlib.figure.Figure`` that ``peanchor report`` draws (the drawing lives in
:mod:`peanchor.report.figures` and :mod:`peanchor.report.lenses`; nothing is written to disk). A name that is one of
the study's conditions (``ape``, ``rope``, ...) gets that condition's style; any other gets a colour, marker and
dash pattern of its own.

A figure has named panels (``plot_ssdc_per_layer``: ``normal`` and ``rpi``); ``panels=[...]`` draws some of them.
``ax=`` draws into your own Axes instead, one per panel (one Axes for one panel), and returns the figure they belong
to, with a legend on the first; without it the figure is new and laid out by matplotlib's constrained layout, the
legend under the panels, so that ``savefig`` clips no label (an example in :func:`plot_ssdc_per_layer`).

Imports: matplotlib, numpy, :mod:`peanchor.report` (figures, figure_style, lenses, inputs, dose_response),
:mod:`peanchor.core.errors`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from peanchor.core.errors import DataError
from peanchor.report.figure_style import legend_entries
from peanchor.report.dose_response import draw_dose_response
from peanchor.report.figures import draw_alpha_sweep, draw_ssdc_per_layer
from peanchor.report.inputs import Analyses, as_results
from peanchor.report.lenses import draw_attention_heads, draw_lenses_per_layer

__all__ = ["as_results", "plot_alpha_sweep", "plot_attention_heads", "plot_dose_response", "plot_lenses",
           "plot_ssdc_per_layer"]

AxesArg = Any  # an Axes, a sequence of them, or the array plt.subplots returns


def _axes(ax: AxesArg) -> list[Axes] | None:
    if ax is None:
        return None
    if isinstance(ax, Axes):
        return [ax]
    import numpy as np

    axes = list(np.asarray(ax, dtype=object).ravel())
    if not axes or not all(isinstance(a, Axes) for a in axes):
        raise DataError(f"ax= must be a matplotlib Axes or a sequence of them, got {type(ax).__name__}")
    return axes


def _tight(fig: Figure) -> Figure:
    """The report's fixed layout turned into matplotlib's constrained layout, the shared legend kept under the
    panels: every label fits whatever the tick labels' width."""
    for legend in list(fig.legends):
        handles, labels = legend.legend_handles, [t.get_text() for t in legend.get_texts()]
        ncols = legend._ncols  # noqa: SLF001 (the column count finish chose; matplotlib has no getter)
        legend.remove()
        fig.legend(handles, labels, loc="outside lower center", ncols=ncols, frameon=False, fontsize=8.5,
                   handlelength=3.2)  # fmt: skip
    fig.set_layout_engine("constrained")
    return fig


def _draw(draw: Callable[..., Figure | None], analyses: Analyses, missing: str, ax: AxesArg,
          panels: Sequence[str] | None) -> Figure:  # fmt: skip
    axes = _axes(ax)
    results = as_results(analyses)
    fig = draw(results, axes=axes, panels=panels)
    if axes is not None:
        if not any(a.has_data() for a in axes):
            raise DataError(f"nothing to plot: {missing}")
        handles, labels = legend_entries(axes)
        if handles:
            axes[0].legend(handles, labels, fontsize=8)
        return axes[0].get_figure()
    if fig is None:
        raise DataError(f"nothing to plot: {missing}")
    return _tight(fig)


def plot_ssdc_per_layer(analyses: Analyses, *, ax: AxesArg = None, panels: Sequence[str] | None = None) -> Figure:
    """SSDC per layer, tokens in order (panel ``normal``) and under RPI (``rpi``), one line per name; a single
    result's band is its spread over RPI draws or its bootstrap CI.

    Returns:
        The matplotlib ``Figure``: a new one, or the one ``ax`` belongs to.

    Examples:
        ```python
        fig = plot_ssdc_per_layer({"mine": read_analysis("runs/x/analysis"), "theirs": result})
        fig.savefig("ssdc.png")
        fig, ax = plt.subplots(); plot_ssdc_per_layer(result, ax=ax, panels=["rpi"])
        ```
    """
    return _draw(draw_ssdc_per_layer, analyses, "no models", ax, panels)


def plot_alpha_sweep(analyses: Analyses, paper_reference: bool = False, *, ax: AxesArg = None,
                     panels: Sequence[str] | None = None) -> Figure:  # fmt: skip
    """ΔSSDC under RPI (panel ``delta_ssdc``) and the Fragility Score of each shift (a panel per shift name)
    against α; ``paper_reference`` adds the paper's APE sweep (ImageNet-100, 224 px) as a dotted grey line, as the
    report does.

    Returns:
        The matplotlib ``Figure``: a new one, or the one ``ax`` belongs to.
    """
    return _draw(lambda r, **kw: draw_alpha_sweep(r, paper_reference, **kw), analyses,
                 "no α sweep (alphas=() or a PE that α does not scale)", ax, panels)  # fmt: skip


def plot_lenses(analyses: Analyses, *, ax: AxesArg = None, panels: Sequence[str] | None = None) -> Figure:
    """Every lens per layer: in order (a panel per lens name, the top row) and under RPI (``<name>_rpi``, the
    bottom row).

    Returns:
        The matplotlib ``Figure``: a new one, or the one ``ax`` belongs to.
    """
    return _draw(draw_lenses_per_layer, analyses, "no lens records", ax, panels)


def plot_attention_heads(analyses: Analyses, *, ax: AxesArg = None, panels: Sequence[str] | None = None) -> Figure:
    """Every head's mean attention distance against its layer, a panel per name.

    Returns:
        The matplotlib ``Figure``: a new one, or the one ``ax`` belongs to.
    """
    return _draw(draw_attention_heads, analyses, "no attention distances (the model could not hand them out)", ax,
                 panels)  # fmt: skip


def plot_dose_response(analyses: Analyses, sweep: str | None = None, layers: Sequence[int] | None = None, *,
                       ax: AxesArg = None, panels: Sequence[str] | None = None) -> Figure:  # fmt: skip
    """A dose-response sweep (``sweep``: its text, None: the first measured) against its doses: top-1 in order and
    under RPI (panel ``top1``), the FS of each shift (``fs_<shift>``) and SSDC at ``layers`` (``ssdc``; None: the
    first, middle and last), solid in order and dashed under RPI; one line per name.

    Returns:
        The matplotlib ``Figure``: a new one, or the one ``ax`` belongs to.
    """
    return _draw(lambda r, **kw: draw_dose_response(r, sweep=sweep, layers=layers, **kw), analyses,
                 "no dose-response sweeps (analyse with sweeps=[...] or --sweep)", ax, panels)  # fmt: skip
