"""The report's section on the lenses (:mod:`peanchor.lenses`: SSDC, the position probe, the mean attention distance,
and any lens registered since): its numbers, its table and sentences, and its two figures, from a
:class:`~peanchor.results.records.Results` (never from models). Everything here loops over the registered lenses; what is
particular to a lens (its per-layer curve, its one number per model, its reference line, its sentences) is the
lens's own (:class:`~peanchor.lenses.Lens`).

Per model, each lens is read normally and under RPI: its per-layer curve (``layers``) and one number, the highest
value over layers or the mean over layers (``stat``). Models analysed before a lens existed (or where it does not
apply, e.g. a model that does not hand out its attention weights) simply have no entry.

Imports: matplotlib, :mod:`peanchor.report` (summary, document, figure_style), :mod:`peanchor.settings.conditions`,
:mod:`peanchor.lenses`, :mod:`peanchor.results.records`, :mod:`peanchor.results.tables` (a lens's one number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from peanchor.results import tables
from peanchor.settings.conditions import label
from peanchor.lenses import LENSES, Lens
from peanchor.report.document import FigureFile, Table
from peanchor.report.figure_style import condition_styles, figure_file, finish, mean_std, select_panels
from peanchor.report.summary import finite, fmt, models_by_condition, summarise

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
from peanchor.results.records import ModelResult, Results

__all__ = [
    "lens_gaps", "lens_intro", "lens_panels", "lens_sentences", "lens_table", "plot_attention_heads",
    "plot_lenses_per_layer",
]


# ---- per-model numbers ---------------------------------------------------------------------------
def lens_layers(m: ModelResult, lens: type[Lens], mode: str) -> list[float]:
    """The lens's value per layer for model ``m`` (empty without its record)."""
    record = m.lens(lens.name)
    return lens.layers(record, mode) if record is not None else []


def lens_number(m: ModelResult, lens: type[Lens], mode: str) -> float:
    """The lens's one number for model ``m``: the highest finite value over layers, or their mean (NaN if none)."""
    return tables.lens_number(lens, m.lens(lens.name), mode)


def _reference(lens: type[Lens], models: list[ModelResult]) -> float:
    """The lens's reference value, when every model with its record has the same one (one grid: one reference)."""
    values = {round(v, 9) for m in models if (record := m.lens(lens.name)) is not None
              and (v := lens.reference(record)) is not None and finite(v)}  # fmt: skip
    return values.pop() if len(values) == 1 else math.nan


def _lens_groups(results: Results) -> dict[str, list[ModelResult]]:
    """The conditions with a record of any lens beyond the required ones (SSDC alone has the rest of the report)."""
    extra = [name for name, lens in LENSES.items() if not lens.required]
    groups = models_by_condition(results)
    return {c: ms for c, ms in groups.items() if any(m.lens(name) is not None for m in ms for name in extra)}


def _shown(groups: dict[str, list[ModelResult]]) -> list[type[Lens]]:
    """The lenses at least one model of ``groups`` has a record of, in report order."""
    return [lens for lens in LENSES.values() if any(m.lens(lens.name) is not None for ms in groups.values() for m in ms)]


# ---- text ----------------------------------------------------------------------------------------
def lens_intro(results: Results) -> str:
    """The section's first paragraph: what each lens shown measures."""
    shown = _shown(_lens_groups(results))
    return ("Each lens is read from the same passes, normally and under RPI (positions are always the slots). "
            + " ".join(f"{lens.description[0].upper()}{lens.description[1:]}." for lens in shown)
            + " Structure anchored to the slots survives RPI in every lens; structure carried by content does not.")


def lens_gaps(results: Results) -> list[str]:
    """What is missing from the lens numbers, one sentence each: a lens that failed in some models' analyses (left
    out of their numbers and lines), and records kept from a lens not installed here (not reported)."""
    failed: dict[str, list[str]] = {}
    unknown: dict[str, list[str]] = {}
    for m in results.models:
        for name, error in m.lens_failures.items():
            failed.setdefault(name, []).append(f"`{m.name}` ({error})")
        for name in m.unknown_lenses:
            unknown.setdefault(name, []).append(f"`{m.name}`")
    out = [f"The {LENSES[n].title if n in LENSES else n} lens failed in the analysis of {', '.join(where)}: those "
           "models have no numbers for it here; rerun the same command to measure it again." for n, where in
           failed.items()]  # fmt: skip
    out += [f"`{n}` was measured by a lens not installed here, for {', '.join(where)}: its records are kept in the "
            "result files but not reported." for n, where in unknown.items()]  # fmt: skip
    return out


def lens_table(results: Results) -> Table | None:
    """Per condition: each lens normally and under RPI (mean ± std over seeds); None without lens data."""
    groups = _lens_groups(results)
    if not groups:
        return None
    shown = _shown(groups)
    rows = [[label(c), str(len(ms))] + [summarise([lens_number(m, lens, mode) for m in ms]).cell()
                                        for lens in shown for mode in ("normal", "rpi")]
            for c, ms in groups.items()]  # fmt: skip
    models = [m for ms in groups.values() for m in ms]
    notes = [lens.table_note for lens in shown if lens.table_note]
    caption = "mean ± std over seeds. max: the highest value over layers" + "".join(f"; {n}" for n in notes)
    references = [(lens, _reference(lens, models)) for lens in shown]
    caption += "".join(f"; {lens.reference_label}: {fmt(v, 2)}" for lens, v in references if finite(v)) + "."
    names = [name for lens in shown for name in (lens.stat_label, f"{lens.stat_label} (RPI)")]
    return Table(["condition", "n", *names], rows, caption)


def lens_sentences(results: Results) -> list[str]:
    """What the lens numbers show, as comparisons of the means over seeds: each lens's own sentences."""
    groups = _lens_groups(results)
    shown = _shown(groups)
    means: dict[str, dict[str, dict[str, float]]] = {}
    for lens in shown:
        for mode in ("normal", "rpi"):
            per = {c: summarise([lens_number(m, lens, mode) for m in ms]).mean for c, ms in groups.items()}
            means.setdefault(lens.name, {})[mode] = {c: v for c, v in per.items() if finite(v)}
    models = [m for ms in groups.values() for m in ms]
    out: list[str] = []
    for lens in shown:
        reference = _reference(lens, models)
        out += lens.sentences(means, reference if finite(reference) else None, fmt)
    return out


# ---- figures -------------------------------------------------------------------------------------
def lens_panels(results: Results) -> list[str]:
    """The panels of :func:`draw_lenses_per_layer`: each lens shown in order (its name), then under RPI
    (``<name>_rpi``)."""
    shown = _shown(_lens_groups(results))
    return [lens.name for lens in shown] + [f"{lens.name}_rpi" for lens in shown]


def draw_lenses_per_layer(results: Results, axes: Sequence[Axes] | None = None,
                          panels: Sequence[str] | None = None) -> Figure | None:  # fmt: skip
    """Each lens per layer, tokens in order (top row) and under RPI (bottom row), one line per condition; None
    without lens records, or when drawn into ``axes`` (one per panel of :func:`lens_panels`)."""
    groups = _lens_groups(results)
    if not groups:
        return None
    from matplotlib.figure import Figure

    styles = condition_styles(list(groups))
    shown = _shown(groups)
    models = [m for ms in groups.values() for m in ms]
    chosen = select_panels("the lenses per layer", lens_panels(results), panels, axes)
    fig = None
    if axes is None and panels is None:
        fig = Figure(figsize=(4.2 * len(shown), 6.4))
        axes = [ax for r in fig.subplots(2, len(shown), squeeze=False, sharex="col", sharey="col") for ax in r]
    elif axes is None:
        fig = Figure(figsize=(4.2 * len(chosen), 3.6))
        axes = list(fig.subplots(1, len(chosen), squeeze=False)[0])
    where = dict(zip(chosen, axes))
    for row, (mode, title) in enumerate((("normal", "tokens in order"), ("rpi", "under RPI"))):
        for lens in shown:
            ax = where.get(lens.name if mode == "normal" else f"{lens.name}_rpi")
            if ax is None:
                continue
            ax.grid(True, color="0.85", linewidth=0.6)
            ax.set_axisbelow(True)
            for c, ms in groups.items():
                rows = [[float(v) if finite(v) else math.nan for v in lens_layers(m, lens, mode)] for m in ms]
                rows = [r for r in rows if r]
                if not rows:
                    continue
                mean, std, n = mean_std(rows)
                layers = np.arange(len(mean))
                ax.plot(layers, mean, label=f"{label(c)} (n={n})", markersize=4, linewidth=1.3, **styles[c])
                if n > 1:
                    ax.fill_between(layers, mean - std, mean + std, color=styles[c]["color"], alpha=0.12, linewidth=0)
            reference = _reference(lens, models)
            if finite(reference):
                ax.axhline(reference, color="0.45", linewidth=1.0, linestyle=(0, (4, 2)), label=lens.reference_label)
            if lens.zero_line:
                ax.axhline(0.0, color="0.4", linewidth=0.7)
            ax.set_title(f"{lens.title}, {title}", fontsize=10)
            ax.set_ylabel(lens.ylabel)
            if row == 1 or panels is not None:
                ax.set_xlabel("layer")
            ax.xaxis.get_major_locator().set_params(integer=True)
    if fig is not None:
        finish(fig, axes)
        fig.subplots_adjust(hspace=0.35)
    return fig


def plot_lenses_per_layer(results: Results, directory: Path) -> FigureFile | None:
    """:func:`draw_lenses_per_layer`, saved as PNG and PDF."""
    shown = _shown(_lens_groups(results))
    references = [lens.reference_label for lens in shown if lens.reference_label]
    caption = (", ".join(lens.title for lens in shown) + " per layer, with tokens in order (top) and under RPI "
               "(bottom; positions are the slots); means over seeds, bands ±1 std"
               + "".join(f"; dashed: {r}" for r in references) + ".")  # fmt: skip
    return figure_file(draw_lenses_per_layer(results), directory, "lenses_per_layer", "The lenses per layer",
                       caption)  # fmt: skip


def draw_attention_heads(results: Results, axes: Sequence[Axes] | None = None,
                         panels: Sequence[str] | None = None) -> Figure | None:  # fmt: skip
    """Every head's mean attention distance against its layer, one panel per condition (Dosovitskiy et al.'s view),
    filled in order and hollow under RPI; all seeds' heads are shown. None without attention records, or when
    drawn into ``axes`` (one per panel: a condition's name)."""
    groups = {c: [m for m in ms if m.attention_distance is not None] for c, ms in _lens_groups(results).items()}
    groups = {c: ms for c, ms in groups.items() if ms}
    if not groups:
        return None
    from matplotlib.figure import Figure

    styles = condition_styles(list(groups))
    chosen = select_panels("attention distance per head", list(groups), panels, axes)
    fig = None
    if axes is None:
        fig = Figure(figsize=(3.0 * len(chosen), 3.4))
        axes = list(fig.subplots(1, len(chosen), squeeze=False, sharey=True)[0])
    axes = list(axes)
    uniform = _reference(LENSES["attention_distance"], [m for ms in groups.values() for m in ms])
    for ax, (c, ms) in zip(axes, ((c, groups[c]) for c in chosen)):
        ax.grid(True, color="0.85", linewidth=0.6)
        ax.set_axisbelow(True)
        st = styles[c]
        for mode, offset, filled in (("normal", -0.12, True), ("rpi", 0.12, False)):
            xs: list[float] = []
            ys: list[float] = []
            for m in ms:
                heads: Any = getattr(m.attention_distance.manhattan, mode)  # type: ignore[union-attr]
                for layer, values in enumerate(heads):
                    xs += [layer + offset] * len(values)
                    ys += [float(v) if finite(v) else math.nan for v in values]
            ax.scatter(xs, ys, marker=st["marker"], s=16, linewidths=0.9, edgecolors=st["color"],
                       facecolors=st["color"] if filled else "none",
                       label="in order (filled)" if filled else "under RPI (hollow)")  # fmt: skip
        if finite(uniform):
            ax.axhline(uniform, color="0.45", linewidth=1.0, linestyle=(0, (4, 2)))
        ax.set_title(f"{label(c)} (n={len(ms)})", fontsize=10)
        ax.set_xlabel("layer")
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_ylabel("mean attention distance (patches)")
    for ax in axes[1:]:  # one legend entry per mode, not per condition
        for coll in ax.collections:
            coll.set_label("_")
    if fig is not None:
        finish(fig, axes)
    return fig


def plot_attention_heads(results: Results, directory: Path) -> FigureFile | None:
    """:func:`draw_attention_heads`, saved as PNG and PDF."""
    caption = ("The mean attention distance (Manhattan, in patches) of every head against its layer, for every seed: "
               "filled with tokens in order, hollow under RPI; the dashed line is the distance of attention spread "
               "evenly over the patches.")  # fmt: skip
    return figure_file(draw_attention_heads(results), directory, "attention_distance_heads",
                       "Attention distance per head", caption)  # fmt: skip
