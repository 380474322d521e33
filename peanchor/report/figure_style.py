"""What every report figure shares: each condition's style, the mean ± std over seeds that the error bars show,
a new figure with the house layout, one legend under the panels, and writing PNG + PDF atomically with
reproducible bytes. :mod:`peanchor.report.figures` and :mod:`peanchor.report.lenses` both draw with these, and
neither imports the other's internals.

Imports: matplotlib, numpy; :mod:`peanchor.core.fileio`, :mod:`peanchor.settings.conditions`, :mod:`peanchor.report` (summary,
document).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from peanchor.core import fileio
from peanchor.settings.conditions import CONDITIONS, PAPER
from peanchor.report.document import FigureFile
from peanchor.report.summary import finite

__all__ = [
    "DPI", "condition_style", "condition_styles", "figure_file", "finish", "group_values", "mean_std", "new_figure", "save",
    "legend_entries", "select_panels",
]

DPI = 150
# Models that are not the study's conditions: Paul Tol's muted colours (none of the conditions' Okabe-Ito ones, no
# grey), markers and dash patterns no condition uses; the three lengths are coprime, so the first 9 * 8 * 5 = 360
# models each get their own combination; the first five differ in all three, the first nine in colour at least.
_SPARE_MARKERS = ("h", "<", ">", "p", "d", "8", "H", "1")
_SPARE_LINES: tuple[Any, ...] = ((0, (2, 2)), (0, (8, 2, 2, 2)), (0, (4, 1, 1, 1)), (0, (1, 2)), (0, (5, 1)))
_SPARE_COLOURS = ("#882255", "#117733", "#332288", "#44AA99", "#999933", "#AA4499", "#CC6677", "#88CCEE", "#DDCC77")


def condition_style(condition: str, index: int = 0) -> dict[str, Any]:
    """matplotlib keyword arguments (marker, linestyle, color) for a condition."""
    style = CONDITIONS[condition].style if condition in CONDITIONS else None
    if style is not None:
        marker, line, colour = style.marker, style.linestyle, style.colour
    else:
        marker = _SPARE_MARKERS[index % len(_SPARE_MARKERS)]
        line = _SPARE_LINES[index % len(_SPARE_LINES)]
        colour = _SPARE_COLOURS[index % len(_SPARE_COLOURS)]
    return {"marker": marker, "linestyle": line, "color": colour}


def condition_styles(names: Sequence[str]) -> dict[str, dict[str, Any]]:
    spare = 0
    out = {}
    for c in names:
        out[c] = condition_style(c, spare)
        spare += c not in CONDITIONS
    return out


def mean_std(rows: list[list[float]]) -> tuple[np.ndarray, np.ndarray, int]:
    """Column-wise mean and sample std of ragged rows (truncated to the shortest); std is 0 for one row."""
    length = min(len(r) for r in rows)
    arr = np.array([r[:length] for r in rows], dtype=np.float64)  # (n, L)
    with warnings.catch_warnings():  # an all-NaN column is a gap in the line, not a problem
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(arr, axis=0)
        std = np.nanstd(arr, axis=0, ddof=1) if len(rows) >= 2 else np.zeros(length)
    return mean, std, len(rows)


def group_values(points: Iterable[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group (x, y) pairs by x: sorted x, mean y and sample std of y (0 for single values)."""
    by_x: dict[float, list[float]] = defaultdict(list)
    for x, y in points:
        if finite(x) and finite(y):
            by_x[round(float(x), 6)].append(float(y))
    xs = np.array(sorted(by_x))
    means = np.array([np.mean(by_x[x]) for x in xs])
    stds = np.array([np.std(by_x[x], ddof=1) if len(by_x[x]) > 1 else 0.0 for x in xs])
    return xs, means, stds


def save(fig: Figure, directory: Path, stem: str) -> tuple[Path, Path]:
    paths = []
    for ext in ("png", "pdf"):
        target = directory / f"{stem}.{ext}"
        # No timestamps or software versions in the files: the same results give the same bytes.
        metadata = {"Software": None} if ext == "png" else {"CreationDate": None, "Producer": None}
        # zlib level 1 for the PNGs: a fifth less time per figure than Pillow's default (6) for files about a tenth
        # larger, the same pixels.
        extra = {"pil_kwargs": {"compress_level": 1}} if ext == "png" else {}
        with fileio.atomic_path(target) as tmp:
            fig.savefig(tmp, format=ext, dpi=DPI, metadata=metadata, **extra)
        paths.append(target)
    return paths[0], paths[1]


def new_figure(
    ncols: int, width_per_panel: float = 4.6, height: float = 3.4, sharey: bool = False
) -> tuple[Figure, list[Axes]]:
    # A fixed layout (margins in inches, set in finish) instead of constrained/tight layout: on a slow
    # machine each of those costs an extra full draw per file.
    fig = Figure(figsize=(width_per_panel * ncols, height))
    axes = fig.subplots(1, ncols, squeeze=False, sharey=sharey)[0]
    for ax in axes:
        ax.grid(True, color="0.85", linewidth=0.6)
        ax.set_axisbelow(True)
    return fig, list(axes)


def legend_entries(axes: Sequence[Axes]) -> tuple[list[Any], list[str]]:
    """The legend handles and labels of all ``axes``, each label once, in the order drawn."""
    handles: list[Any] = []
    labels: list[str] = []
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            if lab not in labels:
                handles.append(h)
                labels.append(lab)
    return handles, labels


def finish(fig: Figure, axes: Sequence[Axes]) -> None:
    """Put one shared legend under the panels and set margins (in inches) around them."""
    handles, labels = legend_entries(axes)
    # Our conditions first, the paper's reference lines last.
    order = sorted(range(len(labels)), key=lambda i: PAPER.label in labels[i])
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    width, height = fig.get_size_inches()
    ncols = max(1, min(len(labels), int(width // 2.4)))
    rows = math.ceil(len(labels) / ncols) if labels else 0
    legend_h = 0.2 * rows + (0.1 if rows else 0.0)
    height += legend_h
    fig.set_size_inches(width, height)
    # 0.95 in on the left: the y label beside tick labels such as "−0.05" (0.7 in cut it off)
    fig.subplots_adjust(left=0.95 / width, right=1 - 0.2 / width, top=1 - 0.35 / height,
                        bottom=(0.6 + legend_h) / height, wspace=0.32)
    if handles:
        fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 0.05 / height), ncols=ncols,
                   frameon=False, fontsize=8.5, handlelength=3.2)


def figure_file(fig: Figure | None, directory: Path, stem: str, title: str, caption: str) -> FigureFile | None:
    """``fig`` saved as ``stem``.png and .pdf in ``directory``, as the report's figure; None when nothing was drawn."""
    if fig is None:
        return None
    png, pdf = save(fig, directory, stem)
    return FigureFile(stem, title, caption, png, pdf)


def select_panels(what: str, available: Sequence[str], panels: Sequence[str] | None,
                  axes: Sequence[Axes] | None) -> list[str]:  # fmt: skip
    """The panels to draw of a figure that has ``available`` ones: ``panels`` (all when None), checked by name, and
    as many as the ``axes`` given to draw them in; one :class:`DataError` line otherwise."""
    from peanchor.core.errors import DataError

    chosen = list(available) if panels is None else [str(p) for p in panels]
    unknown = [p for p in chosen if p not in available]
    if unknown or not chosen:
        raise DataError(f"{what}: no panel {unknown[0] if unknown else '(none chosen)'!r}; its panels are "
                        f"{', '.join(available)}")  # fmt: skip
    if axes is not None and len(axes) != len(chosen):
        raise DataError(f"{what}: {len(chosen)} panel{'s' if len(chosen) > 1 else ''} ({', '.join(chosen)}) but "
                        f"{len(axes)} Axes given: pass one Axes per panel, or panels=[{chosen[0]!r}] to draw "
                        "fewer")  # fmt: skip
    return chosen
