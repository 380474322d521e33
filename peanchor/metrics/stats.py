"""Small-sample statistics for reporting (numpy only): mean ± std over seeds, bootstrap intervals,
paired differences and a permutation test for Spearman's rho.

Every random function takes a ``seed`` and returns the same numbers for the same inputs and seed.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence, TypedDict, Union

import numpy as np

__all__ = ["bootstrap_ci", "mean_std", "paired_bootstrap_diff", "permutation_test_spearman"]

ArrayLike = Union[Sequence[float], np.ndarray]

# Bootstrap draws are generated in blocks of at most this many indices.
_BLOCK_ELEMENTS = 1 << 22


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


def _check_level(level: float) -> None:
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")


def _check_count(n: int, name: str) -> None:
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


def _bootstrap_means(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """``n_boot`` means of resamples (with replacement, same size) of ``values``."""
    n = values.size
    rows = max(1, _BLOCK_ELEMENTS // n)
    means = np.empty(n_boot)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        idx = rng.integers(0, n, size=(stop - start, n))  # (r, n)
        means[start:stop] = values[idx].mean(axis=1)
    return means


def _percentile_interval(samples: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2
    low, high = np.quantile(samples, [tail, 1.0 - tail])
    return float(low), float(high)


def bootstrap_ci(values: ArrayLike, level: float = 0.95, n_boot: int = 10000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap confidence interval of the mean. ``(nan, nan)`` for no values.

    >>> bootstrap_ci([1.0, 1.0, 1.0])
    (1.0, 1.0)
    >>> lo, hi = bootstrap_ci([0.61, 0.64, 0.66, 0.70], seed=1)
    >>> bool(0.61 <= lo < 0.6525 < hi <= 0.70)
    True
    """
    _check_level(level)
    _check_count(n_boot, "n_boot")
    arr = _as_1d(values)
    if arr.size == 0:
        return math.nan, math.nan
    means = _bootstrap_means(arr, n_boot, np.random.default_rng(seed))
    return _percentile_interval(means, level)


def paired_bootstrap_diff(
    a: ArrayLike, b: ArrayLike, level: float = 0.95, n_boot: int = 10000, seed: int = 0
) -> PairedDiff:
    """Bootstrap of the mean paired difference ``mean(a - b)`` (pairs resampled together).

    Returns ``mean_diff``, the percentile interval ``ci_low``/``ci_high``, and a two-sided
    ``p_value`` for "no difference": the bootstrap distribution is shifted to mean 0 and
    ``p = (1 + #{|m* - m| >= |m|}) / (n_boot + 1)``, where ``m`` is the observed mean difference.

    >>> r = paired_bootstrap_diff([0.70, 0.72, 0.69, 0.71], [0.60, 0.63, 0.61, 0.62])
    >>> round(r["mean_diff"], 4), r["ci_low"] > 0, r["p_value"] < 0.01
    (0.09, True, True)
    """
    _check_level(level)
    _check_count(n_boot, "n_boot")
    x, y = _as_1d(a, "a"), _as_1d(b, "b")
    if x.shape != y.shape:
        raise ValueError(f"paired samples must have the same length, got {x.size} and {y.size}")
    if x.size == 0:
        return PairedDiff(mean_diff=math.nan, ci_low=math.nan, ci_high=math.nan, p_value=math.nan)
    diff = x - y
    observed = float(diff.mean())
    means = _bootstrap_means(diff, n_boot, np.random.default_rng(seed))
    low, high = _percentile_interval(means, level)
    # Tolerance so that resamples equal to the observed value up to rounding count as "as extreme".
    tol = 1e-12 * max(1.0, abs(observed))
    extreme = int(np.count_nonzero(np.abs(means - observed) >= abs(observed) - tol))
    p_value = (1 + extreme) / (n_boot + 1)
    return PairedDiff(mean_diff=observed, ci_low=low, ci_high=high, p_value=min(1.0, p_value))


def _rank_average(values: np.ndarray) -> np.ndarray:
    """Tie-averaged 1-based ranks (``scipy.stats.rankdata``, ``"average"``)."""
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)  # last 1-based rank of each distinct value
    return (ends - (counts - 1) / 2.0)[inverse.reshape(-1)]


def _standardise(ranks: np.ndarray) -> np.ndarray:
    centred = ranks - ranks.mean()
    norm = np.sqrt(np.sum(centred**2))
    return centred / norm if norm > 0 else np.full_like(centred, np.nan)


def permutation_test_spearman(x: ArrayLike, y: ArrayLike, n_perm: int = 10000, seed: int = 0) -> PermutationResult:
    """Spearman's rho (tie-averaged) with a two-sided permutation p-value for rho = 0.

    If ``n! <= n_perm`` every permutation of ``y`` is enumerated and the p-value is exact
    (``#{|rho_perm| >= |rho|} / n!``, identity included). Otherwise ``n_perm`` random permutations
    are drawn and ``p = (1 + #{|rho_perm| >= |rho|}) / (n_perm + 1)``. ``rho`` and ``p_value`` are
    NaN when either input is constant or has fewer than 2 values.

    >>> r = permutation_test_spearman([1, 2, 3, 4], [10, 20, 30, 40])
    >>> r["rho"], r["p_value"], r["exact"]
    (1.0, 0.08333333333333333, True)
    """
    _check_count(n_perm, "n_perm")
    xa, ya = _as_1d(x, "x"), _as_1d(y, "y")
    if xa.shape != ya.shape:
        raise ValueError(f"x and y must have the same length, got {xa.size} and {ya.size}")
    n = xa.size
    exact = n < 2 or math.factorial(n) <= n_perm
    if n < 2:
        return PermutationResult(rho=math.nan, p_value=math.nan, exact=exact)
    zx, zy = _standardise(_rank_average(xa)), _standardise(_rank_average(ya))
    rho = float(np.clip(zx @ zy, -1.0, 1.0))
    if math.isnan(rho):
        return PermutationResult(rho=math.nan, p_value=math.nan, exact=exact)
    threshold = abs(rho) - 1e-12
    if exact:
        perms = np.array(list(itertools.permutations(range(n))), dtype=np.intp)  # (n!, n)
        extreme = int(np.count_nonzero(np.abs(zy[perms] @ zx) >= threshold))
        return PermutationResult(rho=rho, p_value=extreme / len(perms), exact=True)
    rng = np.random.default_rng(seed)
    rows = max(1, _BLOCK_ELEMENTS // n)
    extreme = 0
    for start in range(0, n_perm, rows):
        r = min(rows, n_perm - start)
        perms = rng.permuted(np.tile(np.arange(n), (r, 1)), axis=1)  # (r, n)
        extreme += int(np.count_nonzero(np.abs(zy[perms] @ zx) >= threshold))
    return PermutationResult(rho=rho, p_value=(1 + extreme) / (n_perm + 1), exact=False)
