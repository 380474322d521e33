"""The analysis's intervals: every estimate with its bootstrap replicates on the one resampling of the images
(:class:`~peanchor.metrics.bootstrap.GroupBootstrap`), so that differences, ratios and slopes get joint intervals.

* An accuracy's replicates are the correct answers per group over the images per group, resampled
  (:func:`~peanchor.metrics.bootstrap.ratio_replicates`); top-1 under RPI is the mean over the draws, replicate by
  replicate, so its interval covers the images and the permutations.
* FS = 1 − A_shift / A_clean is taken replicate by replicate on the same resample (paired). It is undefined (NaN,
  with the reason) where the clean accuracy is not above chance by its interval: the lower bound of its interval is at
  or below ``chance`` = 1 / the number of classes (without a bootstrap: the accuracy itself).
* ΔSSDC's replicates are those of layer 1 minus those of layer 0 under RPI (:meth:`SSDCLens.replicates`).
* A trend along α (:func:`alpha_trend`) is the least-squares slope over the α points that are not degenerate; its
  interval is the percentile interval of the replicates' slopes. A point is degenerate when it is identical to
  α = 1 by construction (``pe_zero`` removes what α scales) or measures exactly what α = 1 measures (α does not reach
  the model), or, for FS, when FS is undefined there.

Imports: torch; :mod:`peanchor.metrics` (bootstrap, robustness), :mod:`peanchor.results.records` (AlphaTrend).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from peanchor.metrics.bootstrap import GroupBootstrap, group_sizes, ratio_replicates
from peanchor.metrics.robustness import fragility_score
from peanchor.results.records import AlphaTrend

__all__ = ["Estimate", "Resampler", "alpha_trend", "chance_reason", "least_squares_slope"]


@dataclass(frozen=True)
class Estimate:
    """A number and its bootstrap replicates ``(R,)`` (None without a bootstrap)."""

    value: float
    replicates: Tensor | None = None

    def __sub__(self, other: Estimate) -> Estimate:
        reps = None if self.replicates is None or other.replicates is None else self.replicates - other.replicates
        return Estimate(self.value - other.value, reps)


def chance_reason(clean: float, interval: Sequence[float] | None, chance: float | None) -> str | None:
    """Why FS is undefined at a clean accuracy of ``clean`` (its ``interval``), or None where it is defined: the
    clean accuracy is not above ``chance`` by its interval (by itself without one).

    >>> chance_reason(0.3, [0.2, 0.4], 0.25)
    'clean accuracy 0.300 [0.200, 0.400] is not above chance (0.250) by its interval'
    >>> chance_reason(0.5, [0.4, 0.6], 0.25) is None
    True
    """
    if chance is None or not math.isfinite(clean):
        return None if chance is None else "clean accuracy undefined"
    low = interval[0] if interval is not None else clean
    if low > chance:
        return None
    shown = f" [{interval[0]:.3f}, {interval[1]:.3f}]" if interval is not None else ""
    return f"clean accuracy {clean:.3f}{shown} is not above chance ({chance:.3f})" + (
        " by its interval" if interval is not None else "")


class Resampler:
    """The estimates of one analysis on its :class:`GroupBootstrap` (``boot`` None: values only, no intervals)."""

    def __init__(self, boot: GroupBootstrap | None, num_images: int, chance: float | None) -> None:
        self.boot, self.num_images, self.chance = boot, num_images, chance
        self.sizes = group_sizes(num_images, boot.groups) if boot is not None else None  # (G,)

    def accuracy(self, correct: int, by_group: Tensor | None) -> Estimate:
        """Top-1 from a pass's correct answers (and their per-group counts)."""
        reps = None
        if self.boot is not None and by_group is not None:
            reps = ratio_replicates(by_group.to(torch.float64), self.sizes, self.boot.counts)  # type: ignore[arg-type]
        return Estimate(correct / self.num_images, reps)

    @staticmethod
    def mean(estimates: Sequence[Estimate]) -> Estimate:
        """The mean of estimates (RPI draws), replicate by replicate."""
        reps = [e.replicates for e in estimates]
        stacked = None if any(r is None for r in reps) else torch.stack(reps).mean(dim=0)  # type: ignore[arg-type]
        return Estimate(float(sum(e.value for e in estimates) / len(estimates)), stacked)

    def interval(self, estimate: Estimate) -> list[float] | None:
        if self.boot is None or estimate.replicates is None:
            return None
        return self.boot.interval(estimate.replicates)

    def fragility(self, clean: Estimate, shifted: Estimate) -> tuple[Estimate, str | None]:
        """FS of ``shifted`` against ``clean`` (paired replicates), or NaN and the reason where it is undefined."""
        reason = chance_reason(clean.value, self.interval(clean), self.chance)
        if reason is not None:
            return Estimate(math.nan, None), reason
        reps = None
        if clean.replicates is not None and shifted.replicates is not None:
            reps = fragility_score(clean.replicates, shifted.replicates)  # (R,)
        return Estimate(fragility_score(clean.value, shifted.value), reps), None

    def delta(self, curve: Sequence[float], replicates: Tensor | None) -> Estimate:
        """ΔSSDC = layer 1 − layer 0 of an RPI curve (exactly, on the stored floats), replicates ``(R, L)`` jointly."""
        if len(curve) < 2:
            return Estimate(math.nan, None)
        reps = replicates[:, 1] - replicates[:, 0] if replicates is not None else None
        return Estimate(float(curve[1]) - float(curve[0]), reps)


def least_squares_slope(x: Tensor, y: Tensor) -> Tensor:
    """The least-squares slope of ``y (..., K)`` against ``x (K,)``, per leading index (NaN with fewer than two
    distinct x).

    >>> least_squares_slope(torch.tensor([0., 1., 2.]), torch.tensor([[1., 3., 5.], [0., 0., 0.]])).tolist()
    [2.0, 0.0]
    """
    x = x.to(torch.float64)
    dx = x - x.mean()
    denominator = (dx * dx).sum()
    if x.numel() < 2 or denominator == 0:
        return torch.full(y.shape[:-1], math.nan, dtype=torch.float64)
    return ((y.to(torch.float64) - y.mean(dim=-1, keepdim=True)) * dx).sum(dim=-1) / denominator


def alpha_trend(points: Mapping[float, Estimate], excluded: Mapping[float, str],
                boot: GroupBootstrap | None) -> AlphaTrend:  # fmt: skip
    """The slope of a measure against α over ``points`` (α → its estimate) but the ``excluded`` ones (α → why) and
    the undefined ones, with the percentile interval of the replicates' slopes."""
    out = dict(excluded)
    kept = []
    for alpha, estimate in points.items():
        if alpha in out:
            continue
        if not math.isfinite(estimate.value):
            out[alpha] = "undefined here"
            continue
        kept.append(alpha)
    x = torch.tensor(kept, dtype=torch.float64)
    slope = float(least_squares_slope(x, torch.tensor([points[a].value for a in kept], dtype=torch.float64)))
    slope = slope if math.isfinite(slope) else math.nan  # the NaN a file reads back as, so a record round-trips equal
    ci = None
    reps = [points[a].replicates for a in kept]
    if boot is not None and len(kept) >= 2 and all(r is not None for r in reps) and math.isfinite(slope):
        ci = boot.interval(least_squares_slope(x, torch.stack(reps, dim=-1)))  # type: ignore[arg-type]  # (R, K)
    return AlphaTrend(slope=slope, ci=ci, alphas=kept, excluded={str(a): why for a, why in sorted(out.items())})
