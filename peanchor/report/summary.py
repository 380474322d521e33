"""What the report says about a :class:`~peanchor.results.records.Results`, as numbers: models grouped by condition, the
shifts present, mean ± std (and bootstrap CIs) over seeds, paired FS differences against ``none``, and the points
of the ΔSSDC–FS figure (their correlation, over one point per trained model, is in :mod:`~peanchor.report.claims`).
The prose (:mod:`~peanchor.report.prose`) and the figures (:mod:`~peanchor.report.figures`) both read the results
through here.

Statistics: mean ± sample std over seeds; 95% percentile bootstrap CIs of the mean (10,000 resamples, seed 0) once a
condition has at least 3 seeds; paired bootstrap of FS differences against ``none`` (paired by seed). The
resampling is scipy.stats' (:mod:`peanchor.metrics.stats`).

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.settings.conditions`, :mod:`peanchor.metrics.stats`; never a model.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from peanchor.settings.conditions import ordered
from peanchor.metrics.stats import (
    bootstrap_ci,
    mean_std,
    min_sign_flip_p,
    paired_bootstrap_diff,
)
from peanchor.results.records import ModelResult, Results, SweepRow

__all__ = [
    "CI_LEVEL",
    "MIN_SEEDS_FOR_CLAIMS",
    "N_BOOT",
    "PairedDifference",
    "Summary",
    "correlation_points",
    "finite",
    "fmt",
    "metric_getters",
    "models_by_condition",
    "paired_differences",
    "primary_shift",
    "shift_keys",
    "summarise",
]

MIN_SEEDS_FOR_CLAIMS = 3
CI_LEVEL = 0.95
N_BOOT = 10000


def finite(value: Any) -> bool:
    """True for a real, finite number (not None, NaN, inf or a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def models_by_condition(results: Results) -> dict[str, list[ModelResult]]:
    """``condition -> [models]`` in the report order, each list sorted by seed."""
    groups: dict[str, list[ModelResult]] = defaultdict(list)
    for m in results.models:
        groups[m.condition].append(m)
    return {c: sorted(groups[c], key=lambda m: (m.seed, m.name)) for c in ordered(groups)}


def shift_keys(results: Results) -> list[str]:
    """Every shift measured in the results: those of ``results.shifts`` in their order (the preset's, then any
    ``--shift`` added), then any other name a model or sweep point carries, sorted."""
    keys: set[str] = set()
    for m in results.models:
        keys.update(m.fragility)
    for p in results.alpha_sweep:
        keys.update(p.fragility)
    first = list(results.shifts)
    return first + sorted(keys - set(first))


def primary_shift(results: Results) -> str | None:
    """The shift used for the ΔSSDC–FS correlation: ``jpeg`` when present (the paper's), else the first."""
    keys = shift_keys(results)
    return "jpeg" if "jpeg" in keys else (keys[0] if keys else None)


# ---- summaries over seeds ----------------------------------------------------------------------
def fmt(x: Any, digits: int = 3, signed: bool = False) -> str:
    """A number as the report prints it: ``digits`` decimals (with a sign if asked), ``—`` when not finite."""
    if not finite(x):
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


@dataclass
class Summary:
    """Mean ± std over seeds, with a bootstrap CI of the mean once there are enough of them."""

    n: int
    mean: float
    std: float
    ci: tuple[float, float] | None

    def cell(self) -> str:
        if self.n == 0:
            return "—"
        text = fmt(self.mean)
        if self.n >= 2:
            text += f" ± {fmt(self.std)}"
        if self.ci is not None:
            text += f" [{fmt(self.ci[0])}, {fmt(self.ci[1])}]"
        return text


def summarise(values: Sequence[Any]) -> Summary:
    """Mean ± std of the finite values, with a 95% bootstrap CI once there are >= 3 of them."""
    vals = [float(v) for v in values if finite(v)]
    if not vals:
        return Summary(0, math.nan, math.nan, None)
    mean, std = mean_std(vals)
    ci = bootstrap_ci(vals, level=CI_LEVEL, n_boot=N_BOOT, seed=0) if len(vals) >= MIN_SEEDS_FOR_CLAIMS else None
    return Summary(len(vals), mean, std, ci)


def metric_getters(shifts: Sequence[str]) -> list[tuple[str, str, Callable[[ModelResult], Any]]]:
    """(key, column label, getter) of the per-condition table: clean accuracy, FS per shift, peak SSDC, ΔSSDC."""
    getters: list[tuple[str, str, Callable[[ModelResult], Any]]] = [("clean_acc", "clean acc", lambda m: m.clean_acc)]
    for k in shifts:
        getters.append((f"fs_{k}", f"FS {k}", lambda m, k=k: m.fragility.get(k)))
    getters.append(("max_ssdc_rpi", "max SSDC (RPI)", lambda m: m.ssdc.max_rpi()))
    getters.append(("delta_ssdc", "ΔSSDC", lambda m: m.delta_ssdc))
    return getters


# ---- FS against none, paired by seed -------------------------------------------------------------
@dataclass
class PairedDifference:
    condition: str
    shift: str
    n: int  # pairs
    mean_diff: float  # condition − none
    ci_low: float
    ci_high: float
    p_value: float

    @property
    def claim(self) -> bool:
        """Whether there are enough pairs to say anything about significance."""
        return self.n >= MIN_SEEDS_FOR_CLAIMS

    @property
    def p_floor(self) -> float:
        """The smallest p the sign-flip test can give with this many pairs."""
        return min_sign_flip_p(self.n)


def paired_differences(results: Results) -> list[PairedDifference]:
    """FS of every other condition minus FS of ``none`` on the same seed, per shift (bootstrap CI and p)."""
    groups = models_by_condition(results)
    if "none" not in groups or len(groups) < 2:
        return []
    base = {m.seed: m for m in groups["none"]}
    out = []
    for c, ms in groups.items():
        if c == "none":
            continue
        for k in shift_keys(results):
            pairs = [(m.fragility.get(k), base[m.seed].fragility.get(k)) for m in ms if m.seed in base]
            pairs = [(float(a), float(b)) for a, b in pairs if finite(a) and finite(b)]
            if pairs:
                d = paired_bootstrap_diff([a for a, _ in pairs], [b for _, b in pairs], level=CI_LEVEL, n_boot=N_BOOT,
                                          seed=0)  # fmt: skip
                out.append(PairedDifference(c, k, len(pairs), d["mean_diff"], d["ci_low"], d["ci_high"], d["p_value"]))
    return out


# ---- ΔSSDC vs FS ---------------------------------------------------------------------------------
@dataclass
class Point:
    condition: str
    model: str
    alpha: float
    delta_ssdc: float
    fs: float


def correlation_points(results: Results, shift: str | None = None, min_clean_acc: float = 0.0) -> list[Point]:
    """The points of the ΔSSDC–FS correlation: every model (α = 1) and every α-sweep point.

    A sweep point at α = 1 replaces the row of the same model, so no model is counted twice at α = 1. Points with
    a missing or non-finite value are left out, and so are those whose clean accuracy is below ``min_clean_acc``.
    """
    shift = shift or primary_shift(results)
    if shift is None:
        return []
    swept_at_one = {p.model for p in results.alpha_sweep if abs(p.alpha - 1.0) < 1e-9}
    rows: list[ModelResult | SweepRow] = [m for m in results.models if m.name not in swept_at_one]
    rows += results.alpha_sweep
    points = []
    for r in rows:
        model, alpha = (r.name, 1.0) if isinstance(r, ModelResult) else (r.model, r.alpha)
        fs = r.fragility.get(shift)
        if finite(r.delta_ssdc) and finite(fs) and not r.clean_acc < min_clean_acc:
            points.append(Point(r.condition, model, alpha, float(r.delta_ssdc), float(fs)))  # type: ignore[arg-type]
    return points
