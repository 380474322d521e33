"""The report's dose-response sweeps (``--sweep``; :mod:`peanchor.results.doses`): a figure per sweep (top-1, the
Fragility Score and SSDC at chosen layers, with tokens in order and under RPI, against the dose) and the section's
table, from a :class:`~peanchor.results.records.Results` (never from models).

Every model that has a sweep is drawn as its own line (its name), since two models' doses of one sweep need not
mean the same thing (a grid, a frequency index). The doses are categories, in the order the sweep gives them.

Imports: matplotlib, :mod:`peanchor.report` (document, figure_style, summary), :mod:`peanchor.results.doses`,
:mod:`peanchor.lenses`, :mod:`peanchor.results.records`, :mod:`peanchor.results.tables` (a lens's one number).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from peanchor.results import tables
from peanchor.results.doses import DoseSweep
from peanchor.lenses import LENSES
from peanchor.report.document import FigureFile, Table
from peanchor.report.figure_style import figure_file, finish, select_panels
from peanchor.report.summary import fmt
from peanchor.results.records import Results

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["DOSE_INTRO", "dose_panels", "dose_sweeps", "dose_table", "draw_dose_response", "plot_dose_responses"]

#: The section's first paragraph.
DOSE_INTRO = ("Each sweep varies one parameter of one edit (on top of the analysis's own edits) and measures, at every "
              "dose and α = 1, what the analysis measures: top-1, the Fragility Score under the same shifts, and every "
              "lens with tokens in order and under RPI, from the same images and RPI permutations. Structure that "
              "survives RPI is anchored to the slots; the dose at which it goes says what carries it.")


def dose_sweeps(results: Results) -> dict[str, list[tuple[str, DoseSweep]]]:
    """Sweep text → ``(model name, its sweep)`` for every model that has it, in the order first met."""
    out: dict[str, list[tuple[str, DoseSweep]]] = {}
    for m in results.models:
        for sweep in m.dose_sweeps or ():
            out.setdefault(sweep.sweep, []).append((m.name, sweep))
    return out


def _chosen(results: Results, sweep: str | None) -> tuple[str, list[tuple[str, DoseSweep]]] | None:
    sweeps = dose_sweeps(results)
    if not sweeps:
        return None
    if sweep is None:
        sweep = next(iter(sweeps))
    if sweep not in sweeps:
        from peanchor.core.errors import DataError

        raise DataError(f"no dose-response sweep {sweep!r}; measured: {', '.join(sweeps)}")
    return sweep, sweeps[sweep]


def _shifts(runs: list[tuple[str, DoseSweep]]) -> list[str]:
    return list(dict.fromkeys(s for _, sw in runs for d in sw.doses for s in d.fragility))


def dose_panels(results: Results, sweep: str | None = None) -> list[str]:
    """The panels of :func:`draw_dose_response`: ``top1``, ``fs_<shift>`` per shift, ``ssdc``."""
    chosen = _chosen(results, sweep)
    return [] if chosen is None else ["top1", *(f"fs_{s}" for s in _shifts(chosen[1])), "ssdc"]


def _value(v: float) -> float:
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else math.nan


def draw_dose_response(results: Results, axes: Sequence[Axes] | None = None, panels: Sequence[str] | None = None,
                       sweep: str | None = None, layers: Sequence[int] | None = None) -> Figure | None:  # fmt: skip
    """One sweep (``sweep``: its text; None: the first measured) against its doses: top-1 (panel ``top1``), the FS
    of each shift (``fs_<shift>``) and SSDC at ``layers`` (``ssdc``; None: the first, middle and last layer), solid
    with tokens in order and dashed under RPI. None without sweeps, or when drawn into ``axes``."""
    chosen = _chosen(results, sweep)
    if chosen is None:
        return None
    from matplotlib.figure import Figure

    text, runs = chosen
    names = select_panels("the dose response", dose_panels(results, text), panels, axes)
    fig = None
    if axes is None:
        fig = Figure(figsize=(3.6 * len(names), 3.4))
        axes = list(fig.subplots(1, len(names), squeeze=False)[0])
    where = dict(zip(names, axes))
    colours = [f"C{i}" for i in range(10)]
    for i, (model, sw) in enumerate(runs):
        xs = list(range(len(sw.doses)))
        colour = colours[i % len(colours)] if len(runs) > 1 else "0.2"
        who = f"{model}: " if len(runs) > 1 else ""
        if (ax := where.get("top1")) is not None:
            ax.plot(xs, [_value(d.clean_acc) for d in sw.doses], marker="o", color=colour, label=f"{who}in order")
            ax.plot(xs, [_value(d.rpi_acc) for d in sw.doses], marker="o", color=colour, linestyle="--",
                    label=f"{who}under RPI")  # fmt: skip
        for shift in _shifts(runs):
            if (ax := where.get(f"fs_{shift}")) is not None:
                ax.plot(xs, [_value(d.fragility.get(shift, math.nan)) for d in sw.doses], marker="o", color=colour,
                        label=f"{who}in order")  # fmt: skip
        if (ax := where.get("ssdc")) is not None:
            depth = max((len(d.lens("ssdc").normal) for d in sw.doses if d.lens("ssdc") is not None), default=0)
            shown = sorted({0, depth // 2, depth - 1}) if layers is None else list(layers)
            for j, layer in enumerate(l for l in shown if 0 <= l < depth):
                # one model: a colour per layer; several: the model's colour, a marker per layer
                shade, marker = (colours[j % len(colours)], "o") if len(runs) == 1 else (colour, "os^Dv"[j % 5])
                for mode, style in (("normal", "-"), ("rpi", "--")):
                    ys = [_value(getattr(d.lens("ssdc"), mode)[layer]) if d.lens("ssdc") is not None else math.nan
                          for d in sw.doses]  # fmt: skip
                    ax.plot(xs, ys, marker=marker, color=shade, linestyle=style,
                            label=f"{who}layer {layer}, {'in order' if mode == 'normal' else 'under RPI'}")  # fmt: skip
    labels = [d.dose for d in runs[0][1].doses]
    titles = {"top1": "top-1", "ssdc": "SSDC", **{f"fs_{s}": f"Fragility Score, {s}" for s in _shifts(runs)}}
    for name, ax in where.items():
        ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 6 else 0, fontsize=8)
        ax.set_xlabel(f"{runs[0][1].kind}: {runs[0][1].parameter}")
        ax.set_title(titles[name], fontsize=10)
        ax.grid(True, color="0.85", linewidth=0.6)
        ax.set_axisbelow(True)
        if name == "ssdc":
            ax.axhline(0.0, color="0.4", linewidth=0.7)
    if fig is not None:
        finish(fig, axes)
    return fig


def plot_dose_responses(results: Results, directory: Path) -> list[FigureFile]:
    """:func:`draw_dose_response` of every sweep, saved as PNG and PDF (``dose_response_<i>``)."""
    out = []
    for i, text in enumerate(dose_sweeps(results), start=1):
        caption = (f"The dose response of `{text}`: top-1, the Fragility Score under each shift and SSDC at the first, "
                   "middle and last layer against the dose; solid with tokens in order, dashed under RPI (positions "
                   "are the slots).")  # fmt: skip
        made = figure_file(draw_dose_response(results, sweep=text), directory, f"dose_response_{i}",
                           f"Dose response: {text}", caption)  # fmt: skip
        if made is not None:
            out.append(made)
    return out


def dose_table(results: Results, text: str) -> Table:
    """Sweep ``text``: a row per model and dose (top-1 in order and under RPI, the FS of each shift, and each lens's
    one number in order and under RPI)."""
    runs = dose_sweeps(results)[text]
    shifts = _shifts(runs)
    shown = [lens for lens in LENSES.values() if any(d.lens(lens.name) is not None for _, sw in runs for d in sw.doses)]
    rows = []
    for model, sw in runs:
        for d in sw.doses:
            numbers = [tables.lens_number(lens, d.lens(lens.name), mode) for lens in shown for mode in ("normal", "rpi")]
            rows.append([f"`{model}`", f"`{d.dose}`", fmt(d.clean_acc, 3), fmt(d.rpi_acc, 3),
                         *(fmt(d.fragility.get(s, math.nan), 3) for s in shifts), *(fmt(v, 3) for v in numbers)])  # fmt: skip
    header = ["model", runs[0][1].parameter, "top-1", "top-1 (RPI)", *(f"FS {s}" for s in shifts),
              *(name for lens in shown for name in (lens.stat_label, f"{lens.stat_label} (RPI)"))]  # fmt: skip
    base = ", ".join(f"`{b}`" for b in runs[0][1].base)
    caption = (f"`{text}`{f' on top of {base}' if base else ''}, each dose at α = 1; FS: the Fragility Score at the "
               "dose; max: the highest value over layers.")  # fmt: skip
    return Table(header, rows, caption)
