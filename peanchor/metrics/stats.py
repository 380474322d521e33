"""Small-sample statistics for reporting, on scipy.stats: mean ± std over seeds, percentile bootstrap intervals,
paired differences and a permutation test for Spearman's rho.

Every random function takes a ``seed`` (a ``numpy.random.Generator`` seeded with it drives scipy's resampling) and
returns the same numbers for the same inputs and seed. The streaming bootstrap over images lives in
:class:`peanchor.metrics.SSDCAccumulator`, which cannot hold the per-image data scipy would need.

Imports: numpy, scipy.stats.
"""

from __future__ import annotations

import math
from typing import Sequence, TypedDict, Union

import numpy as np
from scipy import stats

__all__ = ["bootstrap_ci", "mean_std", "min_sign_flip_p", "paired_bootstrap_diff", "permutation_test_spearman"]

ArrayLike = Union[Sequence[float], np.ndarray]


class PairedDiff(TypedDict):
    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float


class PermutationResult(TypedDict):
    rho: float
    p_value: float
    exact: bool


def _as_1d(values: ArrayLike, name: str = "values") -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    return arr


def _check(level: float, n: int, name: str) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{name} must be a positive int, got {n!r}")


def mean_std(values: ArrayLike) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1). The std is NaN for fewer than 2 values,
    and both are NaN for none.

    >>> mean_std([1.0, 2.0, 4.0, 5.0])
    (3.0, 1.8257418583505538)
    >>> mean_std([0.5])
    (0.5, nan)
    """
    arr = _as_1d(values)
    if arr.size == 0:
        return math.nan, math.nan
    mean = float(arr.mean())
    std = float(arr.std(ddof=1)) if arr.size >= 2 else math.nan
    return mean, std


def _bootstrap_means(values: np.ndarray, level: float, n_boot: int, seed: int) -> tuple[float, float, np.ndarray]:
    """scipy's percentile bootstrap of the mean: ``(low, high, the n_boot resampled means)``."""
    if values.size == 1:  # scipy needs two observations; every resample of one value is that value
        return float(values[0]), float(values[0]), np.full(n_boot, values[0])
    res = stats.bootstrap(
        (values,), np.mean, n_resamples=n_boot, confidence_level=level, method="percentile",
        vectorized=True, rng=np.random.default_rng(seed),
    )  # fmt: skip
    return float(res.confidence_interval.low), float(res.confidence_interval.high), res.bootstrap_distribution


def bootstrap_ci(values: ArrayLike, level: float = 0.95, n_boot: int = 10000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean. ``(nan, nan)`` for no values.

    >>> bootstrap_ci([2.5])
    (2.5, 2.5)
    >>> lo, hi = bootstrap_ci([0.61, 0.64, 0.66, 0.70], seed=1)
    >>> bool(0.61 <= lo < 0.6525 < hi <= 0.70)
    True
    """
    _check(level, n_boot, "n_boot")
    arr = _as_1d(values)
    if arr.size == 0:
        return math.nan, math.nan
    low, high, _ = _bootstrap_means(arr, level, n_boot, seed)
    return low, high


def min_sign_flip_p(n: int) -> float:
    """The smallest two-sided p the exact sign-flip test of :func:`paired_bootstrap_diff` can give with ``n`` pairs:
    ``2 / 2**n`` (the observed flip and its mirror), 1 for a single pair.

    >>> min_sign_flip_p(3), min_sign_flip_p(6)
    (0.25, 0.03125)
    """
    return min(1.0, 2.0 / 2**n)


def paired_bootstrap_diff(
    a: ArrayLike, b: ArrayLike, level: float = 0.95, n_boot: int = 10000, seed: int = 0
) -> PairedDiff:
    """The mean paired difference ``mean(a - b)``, its bootstrap interval and a sign-flip test.

    ``ci_low``/``ci_high`` is the percentile bootstrap interval (pairs resampled together, i.e. their differences
    resampled). ``p_value`` is the two-sided paired permutation test of "no difference": each pair's two values are
    swapped or not, which flips the sign of its difference, and ``p`` is scipy's two-sided p of the observed mean
    among those sign flips: exact (all ``2**n``) when ``2**n <= n_boot``, else ``n_boot`` random flips. With ``n``
    pairs it cannot fall below :func:`min_sign_flip_p` (0.25 for 3 pairs): a bootstrap p would, which is why it is not used.

    >>> r = paired_bootstrap_diff([0.70, 0.72, 0.69, 0.71, 0.73, 0.70], [0.60, 0.63, 0.61, 0.62, 0.64, 0.62])
    >>> round(r["mean_diff"], 4), r["ci_low"] > 0, r["p_value"]
    (0.0883, True, 0.03125)
    """
    _check(level, n_boot, "n_boot")
    x, y = _as_1d(a, "a"), _as_1d(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired samples must have the same length, got {x.size} and {y.size}")
    if x.size == 0:
        return PairedDiff(mean_diff=math.nan, ci_low=math.nan, ci_high=math.nan, p_value=math.nan)
    diff = x - y  # resampling pairs together is resampling their differences
    observed = float(diff.mean())
    low, high, _ = _bootstrap_means(diff, level, n_boot, seed)
    if np.all(diff == 0) or diff.size == 1:  # one pair: its two flips are ±d, as extreme as each other, p = 1
        return PairedDiff(mean_diff=observed, ci_low=low, ci_high=high, p_value=1.0)

    def mean_diff(u: np.ndarray, v: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.mean(u - v, axis=axis)

    res = stats.permutation_test(
        (x, y), mean_diff, permutation_type="samples", vectorized=True, n_resamples=n_boot,
        alternative="two-sided", rng=np.random.default_rng(seed),
    )  # fmt: skip
    return PairedDiff(mean_diff=observed, ci_low=low, ci_high=high, p_value=min(1.0, float(res.pvalue)))


def _standardised_ranks(values: np.ndarray) -> np.ndarray:
    """Tie-averaged ranks, centred and scaled to unit norm (NaN for constant input)."""
    centred = stats.rankdata(values) - (values.size + 1) / 2.0
    norm = np.sqrt(np.sum(centred**2))
    return centred / norm if norm > 0 else np.full_like(centred, np.nan)


def permutation_test_spearman(x: ArrayLike, y: ArrayLike, n_perm: int = 10000, seed: int = 0) -> PermutationResult:
    """Spearman's rho (tie-averaged) with a two-sided permutation p-value for rho = 0 (``scipy.stats.permutation_test``
    over the pairings, with |rho| as the statistic).

    If ``n! <= n_perm`` every permutation of ``y`` is enumerated and the p-value is exact
    (``#{|rho_perm| >= |rho|} / n!``, identity included). Otherwise ``n_perm`` random permutations
    are drawn and ``p = (1 + #{|rho_perm| >= |rho|}) / (n_perm + 1)``. ``rho`` and ``p_value`` are
    NaN when either input is constant or has fewer than 2 values.

    >>> r = permutation_test_spearman([1, 2, 3, 4], [10, 20, 30, 40])
    >>> r["rho"], r["p_value"], r["exact"]
    (1.0, 0.08333333333333333, True)
    """
    _check(0.5, n_perm, "n_perm")
    xa, ya = _as_1d(x, "x"), _as_1d(y, "y")
    if xa.shape != ya.shape:
        raise ValueError(f"x and y must have the same length, got {xa.size} and {ya.size}")
    n = xa.size
    exact = n < 2 or math.factorial(n) <= n_perm
    if n < 2:
        return PermutationResult(rho=math.nan, p_value=math.nan, exact=exact)
    # Permuting y permutes its ranks, so ranking once and correlating the ranks is Spearman's rho on every
    # permutation: the statistic is a dot product of unit vectors.
    zx, zy = _standardised_ranks(xa), _standardised_ranks(ya)
    rho = float(np.clip(zx @ zy, -1.0, 1.0))
    if math.isnan(rho):
        return PermutationResult(rho=math.nan, p_value=math.nan, exact=exact)

    def abs_rho(v: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.abs(np.sum(zx * v, axis=axis))

    # One sample: scipy permutes only y's order against the fixed x (n! pairings, enumerated when n! <= n_perm).
    res = stats.permutation_test(
        (zy,), abs_rho, permutation_type="pairings", vectorized=True, n_resamples=n_perm, alternative="greater",
        rng=np.random.default_rng(seed),
    )  # fmt: skip
    return PermutationResult(rho=rho, p_value=float(res.pvalue), exact=exact)
