"""The report's section on the three lenses (SSDC, mean attention distance, the position probe): its numbers, its
table and sentences, and its two figures, from a :class:`~peanchor.results.Results` (never from models).

Per model, each lens is read normally and under RPI:

* SSDC: the highest value over layers;
* the position probe: its held-out R² per layer as the mean of the row and column R², and the highest over layers;
* attention distance (Manhattan, in patches): the mean over heads per layer, and the mean over layers and heads,
  beside the distance of attention spread evenly over the patches (``uniform``).

Models analysed before the lenses existed (or whose attention weights could not be had) simply have no entry.

Imports: matplotlib, :mod:`peanchor.report` (summary, document, figure_style), :mod:`peanchor.conditions`,
:mod:`peanchor.results`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from peanchor.conditions import label
from peanchor.report.document import FigureFile, Table
from peanchor.report.figure_style import condition_styles, figure_file, finish, mean_std
from peanchor.report.summary import finite, fmt, models_by_condition, summarise

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure
from peanchor.results import ModelResult, Results

__all__ = ["LENS_INTRO", "lens_sentences", "lens_table", "plot_attention_heads", "plot_lenses_per_layer"]

LENS_INTRO = (
    "Three lenses on the same passes, each normally and under RPI (positions are always the slots): SSDC; the "
    "position probe, a ridge regression from a layer's patch tokens to their grid row and column, fitted on half of "
    "the evaluation images and scored (R², the mean of row and column) on the other half, i.e. how much absolute "
    "position a layer carries linearly; and the mean attention distance, the attention-weighted grid distance "
    "(Manhattan, in patches) from each query patch to the patch keys, i.e. how local each head attends. Structure "
    "anchored to the slots survives RPI in all three; structure carried by content does not: the probe falls to "
    "about 0 and attention stops being local on the slot grid."
)


# ---- per-model numbers ---------------------------------------------------------------------------
def probe_layers(m: ModelResult, mode: str) -> list[float]:
    """Held-out probe R² per layer, the mean of row and column."""
    p = m.position_probe
    if p is None:
        return []
    return [(a + b) / 2 for a, b in zip(getattr(p.row, mode), getattr(p.col, mode))]


def distance_layers(m: ModelResult, mode: str) -> list[float]:
    """Mean attention distance per layer (mean over heads), Manhattan."""
    return m.attention_distance.manhattan.layer_means(mode) if m.attention_distance is not None else []


def _max(values: list[float]) -> float:
    vals = [v for v in values if finite(v)]
    return max(vals) if vals else math.nan


def _mean(values: list[float]) -> float:
    vals = [v for v in values if finite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _uniform(models: list[ModelResult]) -> float:
    values = {round(m.attention_distance.uniform["manhattan"], 9) for m in models
              if m.attention_distance is not None and "manhattan" in m.attention_distance.uniform}  # fmt: skip
    return values.pop() if len(values) == 1 else math.nan  # one grid: one reference


GETTERS: list[tuple[str, str, Callable[[ModelResult], float]]] = [
    ("ssdc_normal", "max SSDC", lambda m: _max(m.ssdc.normal)),
    ("ssdc_rpi", "max SSDC (RPI)", lambda m: _max(m.ssdc.rpi)),
    ("probe_normal", "max probe R²", lambda m: _max(probe_layers(m, "normal"))),
    ("probe_rpi", "max probe R² (RPI)", lambda m: _max(probe_layers(m, "rpi"))),
    ("distance_normal", "attn. distance", lambda m: _mean(distance_layers(m, "normal"))),
    ("distance_rpi", "attn. distance (RPI)", lambda m: _mean(distance_layers(m, "rpi"))),
]


def _lens_groups(results: Results) -> dict[str, list[ModelResult]]:
    groups = models_by_condition(results)
    return {c: ms for c, ms in groups.items() if any(m.position_probe or m.attention_distance for m in ms)}


# ---- text ----------------------------------------------------------------------------------------
def lens_table(results: Results) -> Table | None:
    """Per condition: each lens normally and under RPI (mean ± std over seeds); None without lens data."""
    groups = _lens_groups(results)
    if not groups:
        return None
    rows = [[label(c), str(len(ms))] + [summarise([get(m) for m in ms]).cell() for _, _, get in GETTERS]
            for c, ms in groups.items()]  # fmt: skip
    uniform = _uniform([m for ms in groups.values() for m in ms])
    caption = ("mean ± std over seeds. max: the highest value over layers; probe R²: held-out, mean of row and column; "
               "attn. distance: Manhattan, in patches, mean over layers and heads")  # fmt: skip
    caption += f"; attention spread evenly over the patches has distance {fmt(uniform, 2)}." if finite(uniform) else "."
    return Table(["condition", "n"] + [name for _, name, _ in GETTERS], rows, caption)


def _c(condition: str) -> str:
    return f"`{condition}`"


def lens_sentences(results: Results) -> list[str]:
    """What the lens numbers show, as comparisons of the means over seeds."""
    groups = _lens_groups(results)
    means = {c: {key: summarise([get(m) for m in ms]).mean for key, _, get in GETTERS} for c, ms in groups.items()}
    out = []

    def ranked(key: str) -> list[tuple[str, float]]:
        return sorted(((c, v[key]) for c, v in means.items() if finite(v[key])), key=lambda p: p[1])

    probe = ranked("probe_rpi")
    if len(probe) >= 2:
        out.append(f"Under RPI, the highest probe R² over layers ranges from {fmt(probe[0][1])} ({_c(probe[0][0])}) to "
                   f"{fmt(probe[-1][1])} ({_c(probe[-1][0])}).")  # fmt: skip
    kept = [(c, v["probe_normal"] - v["probe_rpi"]) for c, v in means.items()
            if finite(v["probe_normal"]) and finite(v["probe_rpi"])]  # fmt: skip
    if len(kept) >= 2:
        kept.sort(key=lambda p: p[1])
        out.append(f"RPI lowers the highest probe R² least for {_c(kept[0][0])} (by {fmt(kept[0][1])}) and most for "
                   f"{_c(kept[-1][0])} (by {fmt(kept[-1][1])}).")  # fmt: skip
    uniform = _uniform([m for ms in groups.values() for m in ms])
    distance = ranked("distance_rpi")
    if len(distance) >= 2 and finite(uniform):
        (low, low_value), (high, high_value) = distance[0], distance[-1]
        out.append(f"Under RPI, the mean attention distance ranges from {fmt(low_value, 2)} ({_c(low)}) to "
                   f"{fmt(high_value, 2)} ({_c(high)}); attention spread evenly over the patches has "
                   f"{fmt(uniform, 2)}.")  # fmt: skip
    shared = [c for c in means if finite(means[c]["ssdc_rpi"]) and finite(means[c]["probe_rpi"])]
    pairs = [(a, b) for i, a in enumerate(shared) for b in shared[i + 1 :]]
    if pairs:
        agree = sum((means[a]["ssdc_rpi"] - means[b]["ssdc_rpi"]) * (means[a]["probe_rpi"] - means[b]["probe_rpi"]) > 0
                    for a, b in pairs)  # fmt: skip
        out.append(f"Under RPI, max SSDC and max probe R² order {agree} of {len(pairs)} pairs of conditions the same "
                   "way.")  # fmt: skip
    return out


# ---- figures -------------------------------------------------------------------------------------
PANELS: list[tuple[str, str, Callable[[ModelResult, str], list[float]]]] = [
    ("SSDC", "SSDC", lambda m, mode: list(getattr(m.ssdc, mode))),
    ("position probe", "held-out R² (row, col mean)", probe_layers),
    ("attention distance", "mean over heads (patches)", distance_layers),
]


def draw_lenses_per_layer(results: Results) -> Figure | None:
    """Each lens per layer, tokens in order (top row) and under RPI (bottom row), one line per condition; None
    without lens records."""
    groups = _lens_groups(results)
    if not groups:
        return None
    from matplotlib.figure import Figure

    styles = condition_styles(list(groups))
    fig = Figure(figsize=(4.2 * len(PANELS), 6.4))
    grid = fig.subplots(2, len(PANELS), squeeze=False, sharex="col", sharey="col")
    for row, (mode, title) in enumerate((("normal", "tokens in order"), ("rpi", "under RPI"))):
        for col, (name, ylabel, get) in enumerate(PANELS):
            ax = grid[row][col]
            ax.grid(True, color="0.85", linewidth=0.6)
            ax.set_axisbelow(True)
            for c, ms in groups.items():
                rows = [[float(v) if finite(v) else math.nan for v in get(m, mode)] for m in ms]
                rows = [r for r in rows if r]
                if not rows:
                    continue
                mean, std, n = mean_std(rows)
                layers = np.arange(len(mean))
                ax.plot(layers, mean, label=f"{label(c)} (n={n})", markersize=4, linewidth=1.3, **styles[c])
                if n > 1:
                    ax.fill_between(layers, mean - std, mean + std, color=styles[c]["color"], alpha=0.12, linewidth=0)
            if name == "attention distance":
                uniform = _uniform([m for ms in groups.values() for m in ms])
                if finite(uniform):
                    ax.axhline(uniform, color="0.45", linewidth=1.0, linestyle=(0, (4, 2)), label="uniform attention")
            else:
                ax.axhline(0.0, color="0.4", linewidth=0.7)
            ax.set_title(f"{name}, {title}", fontsize=10)
            ax.set_ylabel(ylabel)
            if row == 1:
                ax.set_xlabel("layer")
            ax.xaxis.get_major_locator().set_params(integer=True)
    axes = [ax for r in grid for ax in r]
    finish(fig, axes)
    fig.subplots_adjust(hspace=0.35)
    return fig


def plot_lenses_per_layer(results: Results, directory: Path) -> FigureFile | None:
    """:func:`draw_lenses_per_layer`, saved as PNG and PDF."""
    caption = ("SSDC, the position probe's held-out R² and the mean attention distance per layer, with tokens in order "
               "(top) and under RPI (bottom; positions are the slots); means over seeds, bands ±1 std. The dashed line "
               "is the attention distance of a head that attends to every patch equally.")  # fmt: skip
    return figure_file(draw_lenses_per_layer(results), directory, "lenses_per_layer", "The three lenses per layer",
                       caption)  # fmt: skip


def draw_attention_heads(results: Results) -> Figure | None:
    """Every head's mean attention distance against its layer, one panel per condition (Dosovitskiy et al.'s view),
    filled in order and hollow under RPI; all seeds' heads are shown. None without attention records."""
    groups = {c: [m for m in ms if m.attention_distance is not None] for c, ms in _lens_groups(results).items()}
    groups = {c: ms for c, ms in groups.items() if ms}
    if not groups:
        return None
    from matplotlib.figure import Figure

    styles = condition_styles(list(groups))
    fig = Figure(figsize=(3.0 * len(groups), 3.4))
    axes = list(fig.subplots(1, len(groups), squeeze=False, sharey=True)[0])
    uniform = _uniform([m for ms in groups.values() for m in ms])
    for ax, (c, ms) in zip(axes, groups.items()):
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
    finish(fig, axes)
    return fig


def plot_attention_heads(results: Results, directory: Path) -> FigureFile | None:
    """:func:`draw_attention_heads`, saved as PNG and PDF."""
    caption = ("The mean attention distance (Manhattan, in patches) of every head against its layer, for every seed: "
               "filled with tokens in order, hollow under RPI; the dashed line is the distance of attention spread "
               "evenly over the patches.")  # fmt: skip
    return figure_file(draw_attention_heads(results), directory, "attention_distance_heads",
                       "Attention distance per head", caption)  # fmt: skip
