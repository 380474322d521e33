"""The report's section on other resolutions (``analysis.resolutions``; :mod:`peanchor.results.resolution`): a
cross-condition table of top-1 and of A(size)/A(native) at every image size, a figure of both against the size,
and sentences read from their intervals, from a :class:`~peanchor.results.records.Results` (never from models). Results
without the record (older files, or analyses that did not ask for it) have no such section.

A cell is the mean over the condition's seeds, as every cell of the report (:func:`~peanchor.report.cells`): ± the
std from 2 seeds, the bootstrap CI of the mean from 3; one seed shows its analysis's own interval.

Imports: :mod:`peanchor.report` (document, figure_style, summary), :mod:`peanchor.settings.conditions`,
:mod:`peanchor.results.resolution`, :mod:`peanchor.results.records`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from peanchor.settings.conditions import label
from peanchor.report.document import FigureFile, Table
from peanchor.report.figure_style import condition_styles, figure_file, finish, new_figure
from peanchor.report.summary import Summary, finite, fmt, models_by_condition, summarise
from peanchor.results.resolution import ResolutionPoint
from peanchor.results.records import ModelResult, Results

__all__ = ["RESOLUTION_INTRO", "plot_resolution", "resolution_sentences", "resolution_sizes", "resolution_tables"]

#: The section's first paragraph (the native size and the conventions are added from the records).
RESOLUTION_INTRO = ("Each model is also evaluated on the same evaluation images resized to other sizes, its positional "
                    "encoding moved to the new patch grid by its own convention: an absolute table resampled, the "
                    "coordinates of a rotation, bias or function kept as integer patch indices (extrapolated past the "
                    "trained grid) or normalised to the image (interpolated), as the PE declares. A(size)/A(native) is "
                    "paired: both accuracies come from the same resample of the images.")
_KEYS = (("acc", "top-1"), ("relative", "A(size)/A(native)"))


def resolution_sizes(results: Results) -> list[int]:
    """Every image size any model was evaluated at, ascending (empty: no model has the record)."""
    return sorted({p.size for m in results.models if m.resolution is not None for p in m.resolution.points})


def _points(models: Sequence[ModelResult], size: int) -> list[ResolutionPoint]:
    return [p for m in models if m.resolution is not None and (p := m.resolution.point(size)) is not None]


def _summary(models: Sequence[ModelResult], size: int, key: str) -> tuple[Summary, tuple[float, float] | None]:
    """The mean over seeds at ``size`` and its band: the CI of the mean (3+ seeds) or one seed's own interval."""
    points = _points(models, size)
    summary = summarise([getattr(p, key) for p in points])
    if summary.ci is not None:
        return summary, summary.ci
    own = getattr(points[0], f"{key}_ci") if len(points) == 1 and summary.n == 1 else None
    band = (float(own[0]), float(own[1])) if own and all(finite(v) for v in own) else None
    return summary, band


def _cell(models: Sequence[ModelResult], size: int, key: str) -> str:
    points = _points(models, size)
    if not points:
        return "not measured"
    summary, band = _summary(models, size, key)
    if summary.n == 0 and key == "relative":
        reasons = sorted({p.relative_undefined for p in points if p.relative_undefined})
        return f"undefined ({'; '.join(reasons)})" if reasons else "undefined"
    if summary.n == 1 and band is not None:
        return f"{fmt(summary.mean)} [{fmt(band[0])}, {fmt(band[1])}]"
    return summary.cell()


def _native(results: Results) -> int | None:
    sizes = {m.resolution.native for m in results.models if m.resolution is not None}
    return sizes.pop() if len(sizes) == 1 else None


def _size_label(size: int, native: int | None, grid: Any) -> str:
    shown = f"{size} px" + (f" ({grid[0]}×{grid[1]})" if grid else "")
    return shown + (", native" if size == native else "")


def resolution_tables(results: Results) -> list[Table]:
    """Top-1 and A(size)/A(native): a row per condition, a column per image size; empty without the record."""
    sizes = resolution_sizes(results)
    if not sizes:
        return []
    groups = {c: ms for c, ms in models_by_condition(results).items() if any(m.resolution for m in ms)}
    native = _native(results)
    grids = {p.size: p.grid for ms in groups.values() for m in ms if m.resolution for p in m.resolution.points}
    header_sizes = [_size_label(s, native, grids.get(s)) for s in sizes]
    moved: dict[str, list[str]] = {}  # coordinates convention → the conditions whose models declare it
    for c, ms in groups.items():
        for way in dict.fromkeys(m.resolution.coordinates for m in ms if m.resolution is not None):
            moved.setdefault(way, []).append(f"`{c}`")
    unmoved = {c: why for c, ms in groups.items() for m in ms if m.resolution and (why := m.resolution.not_measured)}
    modes = sorted({m.resolution.table_mode for ms in groups.values() for m in ms if m.resolution is not None})
    out = []
    for key, name in _KEYS:
        rows = [[label(c), str(len(ms))] + [_cell(ms, s, key) for s in sizes] for c, ms in groups.items()]
        caption = (f"{name} on the evaluation images resized to each size (mean ± std over seeds; [95% bootstrap CI "
                   "of the mean] from 3 seeds; one seed: [its analysis's 95% interval]). Absolute tables resampled "
                   f"({'; '.join(modes)}); coordinates (where the PE has them) "
                   f"{'; '.join(way + 'd for ' + ', '.join(cs) for way, cs in moved.items())}.")  # fmt: skip
        caption += "".join(f" {label(c)}: {why}." for c, why in unmoved.items())
        out.append(Table(["condition", "n", *header_sizes], rows, caption))
    return out


def resolution_sentences(results: Results) -> list[str]:
    """What the table shows at the smallest and the largest size: which condition keeps most and least of its
    accuracy, and which fall below the model without a PE by their intervals."""
    sizes, native = resolution_sizes(results), _native(results)
    groups = {c: ms for c, ms in models_by_condition(results).items() if any(m.resolution for m in ms)}
    out = []
    for size in dict.fromkeys(s for s in (sizes[0], sizes[-1]) if s != native) if sizes else ():
        kept = sorted(((c, _summary(ms, size, "relative")[0].mean) for c, ms in groups.items()),
                      key=lambda p: p[1] if finite(p[1]) else math.inf)  # fmt: skip
        kept = [(c, v) for c, v in kept if finite(v)]
        if len(kept) >= 2:
            out.append(f"At {size} px, A(size)/A(native) is highest for {label(kept[-1][0])} ({fmt(kept[-1][1])}) "
                       f"and lowest for {label(kept[0][0])} ({fmt(kept[0][1])}).")  # fmt: skip
        if "none" in groups:
            _, floor = _summary(groups["none"], size, "acc")
            below = [c for c, ms in groups.items() if c != "none" and floor is not None
                     and (band := _summary(ms, size, "acc")[1]) is not None and band[1] < floor[0]]  # fmt: skip
            if below:
                out.append(f"At {size} px, top-1 of {', '.join(label(c) for c in below)} lies wholly below that of "
                           f"{label('none')} by their intervals.")  # fmt: skip
    return out


def plot_resolution(results: Results, directory: Path) -> FigureFile | None:
    """Top-1 and A(size)/A(native) against the image size, a line per condition (the mean over seeds) with a band
    of its interval; None without the record."""
    sizes = resolution_sizes(results)
    if not sizes:
        return None
    groups = {c: ms for c, ms in models_by_condition(results).items() if any(m.resolution for m in ms)}
    styles = condition_styles(list(groups))
    fig, axes = new_figure(2, width_per_panel=5.0, height=3.8)
    for ax, (key, name) in zip(axes, _KEYS):
        for c, ms in groups.items():
            measured = [s for s in sizes if _points(ms, s)]
            summaries = [_summary(ms, s, key) for s in measured]
            ax.plot(measured, [s.mean for s, _ in summaries], label=label(c), markersize=4, **styles[c])
            banded = [(s, band) for s, (_, band) in zip(measured, summaries) if band is not None]
            if banded:
                ax.fill_between([s for s, _ in banded], [b[0] for _, b in banded], [b[1] for _, b in banded],
                                color=styles[c]["color"], alpha=0.12, linewidth=0)  # fmt: skip
        native = _native(results)
        if native is not None:
            ax.axvline(native, color="0.4", linewidth=0.7, linestyle=":")
        ax.set_xticks(sizes)
        ax.set_xlabel("image size (px)")
        ax.set_title(name, fontsize=10)
    finish(fig, axes)
    caption = ("Top-1 and A(size)/A(native) at each image size, each PE moved to the size's patch grid by its own "
               "convention; lines: the mean over seeds; bands: the 95% bootstrap CI of the mean from 3 seeds, one "
               "seed's own 95% interval (none with 2 seeds); dotted: the native size.")  # fmt: skip
    return figure_file(fig, directory, "resolution", "Other resolutions", caption)
