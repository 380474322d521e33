"""The intervals a claim's verdict reads, and the three-valued rule that turns an interval and a threshold into a
verdict.

Where an interval comes from depends on how many seeds a condition has:

* **n = 1 seed**: the analysis's own interval (its bootstrap over images, and over permutations for RPI:
  ``clean_acc_ci``, ``fragility_ci``, ``SSDCLayers.rpi_ci``, ...). It says how precisely *these trained models*
  were measured; seed-to-seed variation is not in it. A file written before the intervals existed has none.
* **n ≥ 2 seeds**: the t-interval of the mean over seeds (``scipy.stats.t``), so seed-to-seed variation enters.

A verdict is *replicates* when the interval clears the threshold on the claim's side, *does not replicate* when
it lies wholly on the other side, and *inconclusive* otherwise (also when there is no interval). A claim made of
several conditions replicates when all of them do and fails when one fails (:func:`all_of`).

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.report.summary` (formatting).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from scipy import stats

from peanchor.report.summary import finite, fmt
from peanchor.results.records import ModelResult

__all__ = [
    "DOES_NOT_REPLICATE",
    "INCONCLUSIVE",
    "NOT_MEASURED",
    "REPLICATES",
    "Interval",
    "all_of",
    "any_of",
    "at_least",
    "at_most",
    "difference",
    "estimate",
    "fs_estimate",
    "layer_estimates",
    "over_seeds",
    "within",
]

REPLICATES = "replicates"
DOES_NOT_REPLICATE = "does not replicate"
INCONCLUSIVE = "inconclusive"
NOT_MEASURED = "not measured"
LEVEL = 0.95  # the level of the t-interval over seeds (an analysis's own intervals keep their ci_level)


@dataclass(frozen=True)
class Interval:
    """A point estimate and its interval (``low``/``high`` NaN when there is none); ``basis`` says what the
    interval is over ("seeds", "images" or "" for none); ``undefined`` says why the value is not a number."""

    value: float
    low: float = math.nan
    high: float = math.nan
    basis: str = ""
    n: int = 1
    undefined: str = ""
    note: str = ""  # what was left out of it (seeds whose FS is undefined, ...)

    @property
    def bounded(self) -> bool:
        return finite(self.low) and finite(self.high)

    def text(self, digits: int = 2, signed: bool = False) -> str:
        """``0.45 [0.40, 0.50]``, ``0.45 (no interval)`` or ``undefined (reason)``."""
        if self.undefined or not finite(self.value):
            return f"undefined ({self.undefined})" if self.undefined else "undefined"
        value = fmt(self.value, digits, signed)
        if not self.bounded:
            return f"{value} (no interval)"
        return f"{value} [{fmt(self.low, digits, signed)}, {fmt(self.high, digits, signed)}]"


def over_seeds(values: Sequence[float], level: float = LEVEL) -> Interval:
    """The mean of ``values`` (one per seed) with its two-sided t-interval; fewer than 2 values: no interval."""
    vals = [float(v) for v in values if finite(v)]
    if not vals:
        return Interval(math.nan, n=0)
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return Interval(mean, basis="seeds", n=1)
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    half = float(stats.t.ppf(0.5 + level / 2, len(vals) - 1)) * sd / math.sqrt(len(vals))
    return Interval(mean, mean - half, mean + half, "seeds", len(vals))


def _pair(ci: Any) -> tuple[float, float]:
    if isinstance(ci, (list, tuple)) and len(ci) == 2 and all(finite(v) for v in ci):
        return float(ci[0]), float(ci[1])
    return math.nan, math.nan


def estimate(models: Sequence[ModelResult], value: Callable[[ModelResult], Any],
             ci: Callable[[ModelResult], Any]) -> Interval:  # fmt: skip
    """One number of a condition: over seeds from 2 models on, else the one model's own interval (``ci``)."""
    if len(models) >= 2:
        return over_seeds([value(m) for m in models])
    if not models or not finite(value(models[0])):
        return Interval(math.nan, n=len(models))
    low, high = _pair(ci(models[0]))
    return Interval(float(value(models[0])), low, high, "images" if finite(low) else "", 1)


def layer_estimates(models: Sequence[ModelResult], mode: str) -> list[Interval]:
    """SSDC per layer (``mode`` "normal" or "rpi") of a condition, each with its interval."""
    depth = min(len(getattr(m.ssdc, mode)) for m in models)

    def ci(m: ModelResult, layer: int) -> Any:
        bounds = getattr(m.ssdc, f"{mode}_ci", None)
        return [bounds[0][layer], bounds[1][layer]] if bounds and len(bounds) == 2 and len(bounds[0]) > layer else None

    return [estimate(models, lambda m, i=i: getattr(m.ssdc, mode)[i], lambda m, i=i: ci(m, i)) for i in range(depth)]


def _undefined(m: ModelResult, shift: str) -> str:
    reason = (m.fragility_undefined or {}).get(shift)
    if reason:
        return str(reason)
    return "" if finite(m.fragility.get(shift)) else "not a number"


def fs_estimate(models: Sequence[ModelResult], shift: str) -> Interval:
    """FS at ``shift`` of a condition; a seed whose FS is undefined is left out and named, and when every seed's
    is, the estimate is undefined with the reason."""
    defined = [m for m in models if not _undefined(m, shift)]
    if not defined:
        reasons = sorted({_undefined(m, shift) for m in models}) or ["not measured"]
        return Interval(math.nan, n=0, undefined="; ".join(reasons))
    out = estimate(defined, lambda m: m.fragility.get(shift), lambda m: (m.fragility_ci or {}).get(shift))
    if len(defined) < len(models):
        left = ", ".join(f"{m.name}: {_undefined(m, shift)}" for m in models if m not in defined)
        return dataclasses.replace(out, note=f"left out, FS undefined: {left}")
    return out


def difference(a: Interval, b: Interval) -> Interval:
    """``a − b`` for two estimates measured apart: the interval runs from ``a.low − b.high`` to
    ``a.high − b.low`` (wider than a joint interval would be, so a verdict read from it errs towards inconclusive)."""
    if a.undefined or b.undefined:
        return Interval(math.nan, undefined=a.undefined or b.undefined)
    return Interval(a.value - b.value, a.low - b.high, a.high - b.low, a.basis or b.basis, min(a.n, b.n))


def at_least(iv: Interval, threshold: float, strict: bool = False) -> str:
    """Replicates when the whole interval is at or above ``threshold`` (above it with ``strict``), does not when
    it is wholly below, else inconclusive (and without an interval)."""
    if not iv.bounded or not finite(iv.value):
        return INCONCLUSIVE
    if iv.low > threshold or (not strict and iv.low >= threshold):
        return REPLICATES
    return DOES_NOT_REPLICATE if iv.high < threshold or (strict and iv.high <= threshold) else INCONCLUSIVE


def at_most(iv: Interval, threshold: float, strict: bool = False) -> str:
    """Replicates when the whole interval is at or below ``threshold``; the mirror of :func:`at_least`."""
    mirrored = dataclasses.replace(iv, value=-iv.value, low=-iv.high, high=-iv.low)
    return at_least(mirrored, -threshold, strict)


def within(iv: Interval, low: float, high: float) -> str:
    """Replicates when the interval lies inside ``[low, high]``, does not when it lies wholly outside."""
    return all_of([at_least(iv, low), at_most(iv, high)])


def all_of(verdicts: Sequence[str]) -> str:
    """Every part replicates: one that does not fails the whole; none at all: not measured."""
    parts = [v for v in verdicts if v != NOT_MEASURED]
    if not parts:
        return NOT_MEASURED
    if DOES_NOT_REPLICATE in parts:
        return DOES_NOT_REPLICATE
    return REPLICATES if all(v == REPLICATES for v in parts) else INCONCLUSIVE


def any_of(verdicts: Sequence[str]) -> str:
    """Some part replicates; all of them fail: the whole fails."""
    parts = [v for v in verdicts if v != NOT_MEASURED]
    if not parts:
        return NOT_MEASURED
    if REPLICATES in parts:
        return REPLICATES
    return DOES_NOT_REPLICATE if all(v == DOES_NOT_REPLICATE for v in parts) else INCONCLUSIVE
