"""What a table cell of the report shows for one condition: the mean ± std over seeds (and the bootstrap CI of
the mean from 3 seeds, :class:`~peanchor.report.summary.Summary`); for a single seed, its analysis's own interval
where the file records one; and for a Fragility Score that is undefined (clean accuracy not above chance), the
word and the reason, never a number.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.report.summary`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from peanchor.report.summary import Summary, finite, fmt, summarise
from peanchor.results.records import ModelResult, SweepRow

__all__ = ["condition_cell", "own_interval", "sweep_cell"]


def _pair(ci: Any) -> tuple[float, float] | None:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(finite(v) for v in ci):
        return float(ci[0]), float(ci[1])
    return None


def own_interval(m: ModelResult | SweepRow, key: str) -> tuple[float, float] | None:
    """The interval the analysis recorded for ``key`` (``clean_acc``, ``fs_<shift>``, ``delta_ssdc``,
    ``max_ssdc_rpi``: the interval of the peak layer), or None."""
    if key == "clean_acc":
        return _pair(m.clean_acc_ci)
    if key == "delta_ssdc":
        return _pair(m.delta_ssdc_ci)
    if key.startswith("fs_"):
        return _pair((m.fragility_ci or {}).get(key[3:]))
    if key == "max_ssdc_rpi" and isinstance(m, ModelResult):
        rpi, bounds = m.ssdc.rpi, m.ssdc.rpi_ci
        values = [v if finite(v) else -math.inf for v in rpi]
        if not bounds or len(bounds) != 2 or not values:
            return None
        peak = values.index(max(values))
        return _pair([bounds[0][peak], bounds[1][peak]]) if peak < len(bounds[0]) else None
    return None


def _undefined(rows: Sequence[ModelResult | SweepRow], key: str) -> str | None:
    """``undefined (reason)`` when the Fragility Score ``key`` is undefined for every row, else None."""
    if not key.startswith("fs_") or not rows:
        return None
    shift = key[3:]
    reasons = [(r.fragility_undefined or {}).get(shift) for r in rows]
    if all(reasons) or all(not finite(r.fragility.get(shift)) for r in rows):
        named = sorted({str(x) for x in reasons if x})
        return f"undefined ({'; '.join(named)})" if named else "undefined"
    return None


def condition_cell(models: Sequence[ModelResult], key: str, summary: Summary) -> str:
    """A condition's cell: ``undefined (reason)``, a single seed's value with its own interval, or the summary."""
    undefined = _undefined(models, key)
    if undefined:
        return undefined
    if len(models) == 1 and summary.n == 1:
        ci = own_interval(models[0], key)
        if ci is not None:
            return f"{fmt(summary.mean)} [{fmt(ci[0])}, {fmt(ci[1])}]"
    return summary.cell()


def sweep_cell(points: Sequence[SweepRow], key: str) -> str:
    """An α point's cell over seeds (``clean_acc``, ``delta_ssdc``, ``fs_<shift>``), as :func:`condition_cell`."""
    def value(p: SweepRow) -> Any:
        return p.fragility.get(key[3:]) if key.startswith("fs_") else getattr(p, key)

    undefined = _undefined(points, key)
    if undefined:
        return undefined
    summary = summarise([value(p) for p in points])
    if len(points) == 1 and summary.n == 1:
        ci = own_interval(points[0], key)
        if ci is not None:
            return f"{fmt(summary.mean)} [{fmt(ci[0])}, {fmt(ci[1])}]"
    return summary.cell()
