"""Figures for the report, drawn from a :class:`~peanchor.results.records.Results` (never from models).

Every figure is written as PNG and PDF through :func:`peanchor.core.fileio.atomic_path`. Plots use
matplotlib's object API (``Figure`` without pyplot), so importing this module never changes the
caller's backend and works headless. Each condition has its own marker *and* line style as well as a
colour (Okabe-Ito, safe for colour blindness; :attr:`peanchor.settings.conditions.Condition.style`), so the figures stay
readable in black and white. What is plotted comes from :mod:`peanchor.report.summary`, as for the text.

Imports: matplotlib, :mod:`peanchor.report` (summary, cells, claims, provenance, document, figure_style, lenses,
dose_response, resolution), :mod:`peanchor.settings.conditions`, :mod:`peanchor.results.records`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from peanchor.settings.conditions import CONDITIONS, PAPER, label, ordered
from peanchor.report.cells import own_interval
from peanchor.report.claims import model_correlation
from peanchor.report.document import FigureFile
from peanchor.report.provenance import setting_text
from peanchor.report.figure_style import (
    condition_styles,
    figure_file,
    finish,
    group_values,
    mean_std,
    new_figure,
    save,
    select_panels,
)
from peanchor.report.summary import (
    correlation_points,
    finite,
    models_by_condition,
    primary_shift,
    shift_keys,
)
from peanchor.results.records import Results

__all__ = ["SSDC_PANELS", "draw_alpha_sweep", "draw_ssdc_per_layer", "make_figures"]

SSDC_PANELS = {"normal": "tokens in order", "rpi": "under RPI (tokens shuffled)"}


def _draw_ssdc_per_layer(results: Results, axes: list[Axes] | None = None,
                         panels: Sequence[str] | None = None) -> tuple[Figure | None, bool] | None:  # fmt: skip
    """The figure (None when drawn into the caller's ``axes``), and whether a single seed's band is its spread
    over RPI draws or its CI."""
    groups = models_by_condition(results)
    if not groups:
        return None
    modes = select_panels("SSDC per layer", list(SSDC_PANELS), panels, axes)
    styles = condition_styles(list(groups))
    fig = None
    if axes is None:
        fig, axes = new_figure(len(modes), sharey=True)
    single_band = False
    for ax, mode in zip(axes, modes):
        title = SSDC_PANELS[mode]
        for c, ms in groups.items():
            rows = [[float(v) if finite(v) else math.nan for v in getattr(m.ssdc, mode)] for m in ms]
            rows = [r for r in rows if r]
            if not rows:
                continue
            mean, std, n = mean_std(rows)
            layers = np.arange(len(mean))
            st = styles[c]
            ax.plot(layers, mean, label=f"{label(c)} (n={n})", markersize=5, linewidth=1.4, **st)
            low, high = mean - std, mean + std
            if n == 1:  # one seed: show the model's own spread over RPI draws or its CI when recorded
                ssdc = ms[0].ssdc
                ci = ssdc.normal_ci if mode == "normal" else ssdc.rpi_ci
                if ci is not None and len(ci) == 2:
                    low = np.array(ci[0][: len(mean)], dtype=float)
                    high = np.array(ci[1][: len(mean)], dtype=float)
                    single_band = True
                elif mode == "rpi":
                    s = np.array(ssdc.rpi_std[: len(mean)], dtype=float)
                    low, high = mean - s, mean + s
                    single_band = True
            if np.any(high > low):
                ax.fill_between(layers, low, high, color=st["color"], alpha=0.12, linewidth=0)
                if np.all((low <= mean) & (mean <= high)):
                    ax.errorbar(layers, mean, yerr=[mean - low, high - mean], fmt="none", ecolor=st["color"],
                                elinewidth=0.8, capsize=2)
                else:  # a percentile interval need not contain its estimate: drawn from low to high as it is
                    ax.vlines(layers, low, high, colors=st["color"], linewidth=0.8)
        ax.axhline(0.0, color="0.4", linewidth=0.7)
        ax.set_title(f"SSDC per layer, {title}", fontsize=10)
        ax.set_xlabel("layer (0 = LN1 of patch embeddings + PE)")
        if ax is axes[0]:  # the y axis is shared
            ax.set_ylabel("SSDC")
        ax.xaxis.get_major_locator().set_params(integer=True)
    if fig is not None:
        finish(fig, axes)
    return fig, single_band


def draw_ssdc_per_layer(results: Results, axes: list[Axes] | None = None,
                        panels: Sequence[str] | None = None) -> Figure | None:  # fmt: skip
    """SSDC per layer, tokens in order (left, panel ``normal``) and under RPI (right, ``rpi``), one line per
    condition; None without models, or when drawn into ``axes`` (one per panel)."""
    drawn = _draw_ssdc_per_layer(results, axes, panels)
    return drawn[0] if drawn is not None else None


def _plot_ssdc_per_layer(results: Results, directory: Path) -> FigureFile | None:
    drawn = _draw_ssdc_per_layer(results)
    if drawn is None or drawn[0] is None:
        return None
    fig, single_band = drawn
    png, pdf = save(fig, directory, "ssdc_per_layer")
    caption = ("SSDC per layer with tokens in their order (left) and under random permutation at inference (right); "
               "lines are means over seeds, bands and bars ±1 std over seeds")
    if single_band:
        caption += " (for a single seed: the spread over RPI draws or the recorded CI)"
    return FigureFile("ssdc_per_layer", "SSDC per layer", caption + ".", png, pdf)


def draw_alpha_sweep(results: Results, paper_reference: bool = True, axes: list[Axes] | None = None,
                     panels: Sequence[str] | None = None) -> Figure | None:  # fmt: skip
    """ΔSSDC (under RPI, panel ``delta_ssdc``) and the Fragility Score of each shift (a panel per shift name)
    against α, one line per condition, with the paper's APE sweep as a reference line unless ``paper_reference``
    is False; None without a sweep, or when drawn into ``axes`` (one per panel)."""
    sweep = [p for p in results.alpha_sweep if finite(p.alpha)]
    if not sweep:
        return None
    conds = ordered(p.condition for p in sweep)
    styles = condition_styles(conds)
    keys = [k for k in shift_keys(results) if any(finite(p.fragility.get(k)) for p in sweep)]
    chosen = select_panels("α sweep", ["delta_ssdc", *keys], panels, axes)
    fig = None
    if axes is None:
        fig, axes = new_figure(len(chosen), width_per_panel=4.0)
    same_shifts = results.shifts.get("jpeg") == PAPER.shifts["jpeg"]
    getters: dict[str, tuple[str, Any]] = {"delta_ssdc": ("ΔSSDC (under RPI)", lambda p: p.delta_ssdc)}
    getters |= {k: (f"FS ({k})", (lambda p, k=k: p.fragility.get(k))) for k in keys}
    cell_keys = {"delta_ssdc": "delta_ssdc", **{k: f"fs_{k}" for k in keys}}
    for ax, (name, (panel, get)) in zip(axes, ((c, getters[c]) for c in chosen)):
        for c in conds:
            xs, means, stds = group_values((p.alpha, get(p)) for p in sweep if p.condition == c)
            if xs.size == 0:
                continue
            seeds = len({p.seed for p in sweep if p.condition == c})
            ax.errorbar(xs, means, yerr=stds if np.any(stds > 0) else None, label=f"{label(c)} (n={seeds})",
                        markersize=5, linewidth=1.4, capsize=2, elinewidth=0.8, **styles[c])
            if seeds == 1:  # one seed: its analysis's own interval at each α, where recorded, as a band
                band = sorted((p.alpha, own_interval(p, cell_keys[name])) for p in sweep if p.condition == c)
                band = [(a, ci) for a, ci in band if ci is not None]
                if band:
                    ax.fill_between([a for a, _ in band], [ci[0] for _, ci in band], [ci[1] for _, ci in band],
                                    color=styles[c]["color"], alpha=0.12, linewidth=0)
        ref_key = "delta_ssdc" if panel.startswith("ΔSSDC") else ("fs_jpeg" if panel == "FS (jpeg)" and same_shifts else None)
        if ref_key is not None and paper_reference:
            ape = CONDITIONS["ape"].alpha_sweep
            assert ape is not None
            ax.plot(ape.alpha, getattr(ape, ref_key), color="0.55", linestyle=(0, (1, 1.5)),
                    marker=".", linewidth=1.0, label=f"APE, {PAPER.label}")
        ax.set_xlabel("α (PE scale at inference)")
        ax.set_ylabel(panel)
        ax.set_title(f"{panel} vs α", fontsize=10)
        ax.set_xlim(-0.02, 1.05)
    if fig is not None:
        finish(fig, axes)
    return fig


def _plot_alpha_sweep(results: Results, directory: Path) -> FigureFile | None:
    caption = ("ΔSSDC (RPI on) and Fragility Scores (clean and shifted accuracy both at that α, RPI off) as the PE is scaled "
               "by α at inference; means over seeds, bars ±1 std (one seed: a band of its analysis's 95% interval where "
               "recorded); the dotted grey line is the paper's APE sweep "
               f"({PAPER.label}), shown for FS only when our shifts are the paper's.")
    return figure_file(draw_alpha_sweep(results), directory, "alpha_sweep", "α sweep", caption)


def _plot_correlation(results: Results, directory: Path) -> FigureFile | None:
    shift = primary_shift(results)
    points = correlation_points(results, shift)
    if not points:
        return None
    _, rho, _ = model_correlation(results)
    conds = ordered(p.condition for p in points)
    styles = condition_styles(conds)
    models = {m.name: m for m in results.models}
    fig, axes = new_figure(1, width_per_panel=5.6, height=4.2)
    ax = axes[0]
    for c in conds:
        st = styles[c]
        for full, suffix in ((True, "α = 1"), (False, "α < 1")):
            sel = [p for p in points if p.condition == c and (abs(p.alpha - 1.0) < 1e-9) == full]
            if not sel:
                continue
            ax.scatter([p.delta_ssdc for p in sel], [p.fs for p in sel], marker=st["marker"], s=38,
                       facecolors=st["color"] if full else "none", edgecolors=st["color"], linewidths=1.1,
                       label=f"{label(c)}, {suffix}")
            for p in sel if full else []:  # a model's own 95% intervals, where its analysis recorded them
                m = models.get(p.model)
                x_ci, y_ci = (own_interval(m, "delta_ssdc"), own_interval(m, f"fs_{shift}")) if m else (None, None)
                if x_ci is not None and y_ci is not None:
                    ax.errorbar([p.delta_ssdc], [p.fs], xerr=[[p.delta_ssdc - x_ci[0]], [x_ci[1] - p.delta_ssdc]],
                                yerr=[[p.fs - y_ci[0]], [y_ci[1] - p.fs]], fmt="none", ecolor=st["color"],
                                elinewidth=0.8, capsize=2)  # fmt: skip
    title = (f"Spearman ρ, {rho.n} models at α = 1: {rho.text(2, True)}" if finite(rho.value)
             else f"{rho.n} models at α = 1: too few for an interval of ρ")
    stat_text = title + (" (95% Fisher-z interval)" if finite(rho.value) else "")
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("ΔSSDC = SSDC(layer 1) − SSDC(layer 0), under RPI")
    ax.set_ylabel(f"Fragility Score ({shift})")
    finish(fig, axes)
    png, pdf = save(fig, directory, "delta_ssdc_vs_fs")
    caption = (f"ΔSSDC against FS ({shift}) for every model (filled, α = 1; bars: its analysis's 95% intervals where "
               f"recorded) and every α-sweep point (hollow, not in "
               f"the correlation: one model's α points are one sample); {stat_text}.")
    return FigureFile("delta_ssdc_vs_fs", f"ΔSSDC vs FS ({shift})", caption, png, pdf)


def _plot_severities(results: Results, directory: Path) -> FigureFile | None:
    groups = {c: [m for m in ms if m.severity_fragility] for c, ms in models_by_condition(results).items()}
    groups = {c: ms for c, ms in groups.items() if ms}
    if not groups:
        return None
    kinds: list[str] = []  # every kind swept, in the order it was measured
    for ms in groups.values():
        for m in ms:
            kinds += [k for k in m.severity_fragility or {} if k not in kinds]
    styles = condition_styles(list(groups))
    fig, axes = new_figure(len(kinds), width_per_panel=4.0, sharey=True)
    for ax, kind in zip(axes, kinds):
        for c, ms in groups.items():
            # FS is 0 at severity 0 (clean) by definition; the curve starts there.
            rows = [[0.0] + [float(v) if finite(v) else math.nan for v in (m.severity_fragility or {})[kind]]
                    for m in ms if (m.severity_fragility or {}).get(kind)]  # fmt: skip
            if not rows:
                continue
            mean, std, n = mean_std(rows)
            sev = np.arange(len(mean))
            ax.errorbar(sev, mean, yerr=std if n > 1 else None, label=f"{label(c)} (n={n})", markersize=5,
                        linewidth=1.4, capsize=2, elinewidth=0.8, **styles[c])
        ax.axhline(0.0, color="0.6", linewidth=0.6, zorder=0)
        ax.set_title(f"FS vs {kind} severity", fontsize=10)
        ax.set_xlabel("severity (0 = clean)")
        if ax is axes[0]:  # the y axis is shared
            ax.set_ylabel("FS = 1 − A_shift / A_clean")
        ax.xaxis.get_major_locator().set_params(integer=True)
    finish(fig, axes)
    png, pdf = save(fig, directory, "severity_curves")
    table = results.severity_table
    source = f" from the {table} table" if table else ""
    caption = (f"Fragility Score against corruption severity 1–5{source} (0 is clean, FS = 0), for every condition; "
               "means over seeds, bars ±1 std. Lower is more robust.")
    return FigureFile("severity_curves", "FS against severity", caption, png, pdf)


def make_figures(results: Results, directory: str | Path) -> list[FigureFile]:
    """Draw every figure the results allow into ``directory`` (PNG + PDF each); skip those without data."""
    from peanchor.report.dose_response import plot_dose_responses
    from peanchor.report.resolution import plot_resolution
    from peanchor.report.lenses import (  # built on this module's helpers
        plot_attention_heads,
        plot_lenses_per_layer,
    )

    directory = Path(directory)
    made = []
    for plot in (_plot_ssdc_per_layer, plot_lenses_per_layer, plot_attention_heads, _plot_alpha_sweep,
                 _plot_correlation, _plot_severities):  # fmt: skip
        fig = plot(results, directory)
        if fig is not None:
            made.append(fig)
    made += plot_dose_responses(results, directory)  # a figure per dose-response sweep
    made += [f for f in (plot_resolution(results, directory),) if f is not None]  # other resolutions
    # Every legend names what the models were measured on and under (the data, any intervention).
    setting = f" Measured on {setting_text(results)}."
    return [dataclasses.replace(f, caption=f.caption.rstrip() + setting) for f in made]
