"""peanchor.metrics.stats (thin wrappers over scipy.stats) against brute-force references: exact enumeration of
every bootstrap resample or permutation, and scipy.stats.spearmanr."""

from __future__ import annotations

import itertools
import math
import warnings
import statistics

import numpy as np
import pytest
from scipy import stats as sps

from peanchor.metrics import bootstrap_ci, mean_std, paired_bootstrap_diff, permutation_test_spearman


def _exact_bootstrap_means(values: np.ndarray) -> np.ndarray:
    """The mean of every one of the n**n equally likely resamples (with replacement) of ``values``."""
    n = len(values)
    return np.array([values[list(idx)].mean() for idx in itertools.product(range(n), repeat=n)])


# --------------------------------------------------------------------------------------- mean_std


def test_mean_std_matches_statistics_module() -> None:
    values = [0.6406, 0.6568, 0.6901, 0.5682]
    mean, std = mean_std(values)
    assert mean == pytest.approx(statistics.mean(values), abs=1e-15)
    assert std == pytest.approx(statistics.stdev(values), abs=1e-15)
    assert mean_std(np.array([2.0, 2.0])) == (2.0, 0.0)
    one = mean_std([0.3])
    assert one[0] == 0.3 and math.isnan(one[1])
    assert all(math.isnan(v) for v in mean_std([]))
    with pytest.raises(ValueError):
        mean_std([[1.0, 2.0]])


# ----------------------------------------------------------------------------------- bootstrap_ci


def test_bootstrap_ci_close_to_exact_enumeration() -> None:
    values = np.array([0.1, 0.4, 0.45, 0.9, 1.3])
    exact = _exact_bootstrap_means(values)
    low, high = bootstrap_ci(values, n_boot=20000, seed=0)
    spread = values.max() - values.min()
    assert low == pytest.approx(np.quantile(exact, 0.025), abs=0.03 * spread)
    assert high == pytest.approx(np.quantile(exact, 0.975), abs=0.03 * spread)


def test_bootstrap_ci_known_cases_and_determinism() -> None:
    assert bootstrap_ci([0.7, 0.7, 0.7]) == pytest.approx((0.7, 0.7), abs=1e-15)
    assert bootstrap_ci([0.0, 1.0], n_boot=4000) == (0.0, 1.0)  # means 0, .5, 1 with prob 1/4, 1/2, 1/4
    assert bootstrap_ci([2.5]) == (2.5, 2.5)
    assert all(math.isnan(v) for v in bootstrap_ci([]))
    values = [0.1, 0.5, 0.2, 0.9, 0.4]
    assert bootstrap_ci(values, seed=3) == bootstrap_ci(values, seed=3)
    assert bootstrap_ci(values, seed=3) != bootstrap_ci(values, seed=4)
    low80, high80 = bootstrap_ci(values, level=0.8)
    low99, high99 = bootstrap_ci(values, level=0.99)
    assert low99 <= low80 < high80 <= high99
    for bad in ({"level": 1.0}, {"level": 0.0}, {"n_boot": 0}):
        with pytest.raises(ValueError):
            bootstrap_ci(values, **bad)  # type: ignore[arg-type]


# -------------------------------------------------------------------------- paired_bootstrap_diff


def _sign_flip_p(diff: np.ndarray) -> float:
    """Brute force: the two-sided p of the observed mean among all 2**n sign flips of the differences."""
    import itertools

    observed = diff.mean()
    means = np.array([np.mean(diff * np.array(signs)) for signs in itertools.product((1, -1), repeat=diff.size)])
    tol = 1e-12
    less, greater = np.mean(means <= observed + tol), np.mean(means >= observed - tol)
    return min(1.0, 2 * min(less, greater))


def test_paired_bootstrap_diff_interval_is_the_bootstrap_of_the_differences_and_p_is_the_exact_sign_flip_test() -> None:
    a = np.array([0.61, 0.58, 0.66, 0.60, 0.63])
    b = np.array([0.60, 0.60, 0.61, 0.59, 0.615])
    result = paired_bootstrap_diff(a, b, level=0.9, n_boot=20000, seed=11)
    diff = a - b
    observed = diff.mean()
    assert result["mean_diff"] == pytest.approx(observed, abs=1e-15)
    # Resampling pairs together is resampling their differences: the same interval from the same draws.
    assert (result["ci_low"], result["ci_high"]) == pytest.approx(bootstrap_ci(diff, 0.9, 20000, seed=11), abs=1e-15)
    exact = _exact_bootstrap_means(diff)  # all 5**5 resamples
    spread = diff.max() - diff.min()
    assert result["ci_low"] == pytest.approx(np.quantile(exact, 0.05), abs=0.03 * spread)
    assert result["ci_high"] == pytest.approx(np.quantile(exact, 0.95), abs=0.03 * spread)
    expected = _sign_flip_p(diff)
    assert 0.05 < expected < 1  # a case where the p-value is informative
    assert result["p_value"] == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("n", [3, 4, 6, 8])
def test_paired_sign_flip_p_has_its_floor_when_every_difference_has_one_sign(n: int) -> None:
    """All n differences negative: the observed mean is the most extreme of the 2**n flips, p = 2 / 2**n; a
    bootstrap p would be ~1/n_boot here, whatever n."""
    rng = np.random.default_rng(n)
    b = rng.uniform(0.5, 0.7, n)
    a = b - rng.uniform(0.02, 0.09, n)
    result = paired_bootstrap_diff(a, b)
    assert result["p_value"] == pytest.approx(2 / 2**n) == pytest.approx(_sign_flip_p(a - b))
    assert result["ci_high"] < 0


def test_paired_sign_flip_p_random_flips_when_exact_is_too_many() -> None:
    rng = np.random.default_rng(5)
    diff = rng.normal(0.01, 0.03, 14)
    exact = _sign_flip_p(diff)  # 16,384 flips
    result = paired_bootstrap_diff(diff, np.zeros_like(diff), n_boot=4000, seed=2)
    assert abs(result["p_value"] - exact) < 4 * math.sqrt(exact * (1 - exact) / 4000) + 1e-3


def test_paired_bootstrap_diff_extremes() -> None:
    same = paired_bootstrap_diff([0.5, 0.6, 0.7], [0.5, 0.6, 0.7])
    assert same["mean_diff"] == 0.0 and same["p_value"] == 1.0
    one = paired_bootstrap_diff([0.3], [0.5])  # a single pair: its two sign flips are equally extreme
    assert one["mean_diff"] == pytest.approx(-0.2) and one["p_value"] == 1.0 == pytest.approx(_sign_flip_p(np.array([-0.2])))
    assert one["ci_low"] == one["ci_high"] == pytest.approx(-0.2)
    shifted = paired_bootstrap_diff([0.6, 0.7, 0.8, 0.75], [0.5, 0.6, 0.7, 0.65], n_boot=999)
    assert shifted["mean_diff"] == pytest.approx(0.1)
    assert shifted["p_value"] == pytest.approx(2 / 16)  # the observed mean is the largest of the 16 sign flips
    assert shifted["ci_low"] == pytest.approx(0.1) and shifted["ci_high"] == pytest.approx(0.1)
    with pytest.raises(ValueError, match="same length"):
        paired_bootstrap_diff([1.0, 2.0], [1.0])


# ---------------------------------------------------------------------- permutation_test_spearman


def _enumerated_p(x: np.ndarray, y: np.ndarray) -> float:
    rho = sps.spearmanr(x, y).statistic
    perms = list(itertools.permutations(range(len(y))))
    hits = sum(1 for p in perms if abs(sps.spearmanr(x, y[list(p)]).statistic) >= abs(rho) - 1e-12)
    return hits / len(perms)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_permutation_test_exact_matches_enumeration(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 3, size=5).astype(float)  # ties in x
    x[:2] = [0.0, 2.0]  # never constant
    y = rng.normal(size=5)
    result = permutation_test_spearman(x, y)
    assert result["exact"] is True
    assert result["rho"] == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)
    assert result["p_value"] == pytest.approx(_enumerated_p(x, y), abs=1e-12)


def test_permutation_test_monte_carlo_close_to_exact() -> None:
    rng = np.random.default_rng(3)
    x = np.arange(8.0)
    y = x + rng.normal(scale=4.0, size=8)
    result = permutation_test_spearman(x, y, n_perm=20000, seed=0)
    assert result["exact"] is False
    assert result["rho"] == pytest.approx(sps.spearmanr(x, y).statistic, abs=1e-12)
    # Exact p by vectorised enumeration of all 8! permutations (more than n_perm, so the test is Monte Carlo).
    rx = sps.rankdata(x) - 4.5
    ry = sps.rankdata(y)[np.array(list(itertools.permutations(range(8))))] - 4.5  # (8!, 8), mean rank 4.5
    rho_perm = (ry @ rx) / (np.linalg.norm(ry, axis=1) * np.linalg.norm(rx))
    exact = np.mean(np.abs(rho_perm) >= abs(result["rho"]) - 1e-12)
    sigma = math.sqrt(exact * (1 - exact) / 20000)
    assert abs(result["p_value"] - exact) < 4 * sigma + 1e-4
    assert permutation_test_spearman(x, y, n_perm=500, seed=4) == permutation_test_spearman(x, y, n_perm=500, seed=4)


def test_permutation_test_degenerate_inputs() -> None:
    constant = permutation_test_spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    assert math.isnan(constant["rho"]) and math.isnan(constant["p_value"])
    single = permutation_test_spearman([1.0], [2.0])
    assert math.isnan(single["rho"])
    strong = permutation_test_spearman(np.arange(30.0), np.arange(30.0) ** 2, n_perm=2000)
    assert strong["rho"] == 1.0 and strong["p_value"] == pytest.approx(1 / 2001)
    with pytest.raises(ValueError, match="same length"):
        permutation_test_spearman([1.0, 2.0], [1.0, 2.0, 3.0])


# ---- refusals and quiet edges (found by mutation testing) ---------------------------------------------------------


def test_a_single_value_has_no_std_and_no_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # numpy's ddof=1 std of one value would warn
        mean, std = mean_std([0.3])
    assert mean == 0.3 and math.isnan(std)


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda n: bootstrap_ci([1.0, 2.0], n_boot=n), "n_boot"),
        (lambda n: paired_bootstrap_diff([1.0, 2.0], [0.0, 1.0], n_boot=n), "n_boot"),
        (lambda n: permutation_test_spearman([1.0, 2.0, 3.0], [3.0, 1.0, 2.0], n_perm=n), "n_perm"),
    ],
)
def test_resample_counts_are_checked_by_name(call, name) -> None:
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match=rf"^{name} must be a positive int, got {bad!r}$"):
            call(bad)


def test_levels_are_checked_to_the_letter() -> None:
    for level in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^level must be in \(0, 1\), got {level!r}$"):
            bootstrap_ci([1.0, 2.0], level=level)
        with pytest.raises(ValueError, match=rf"^level must be in \(0, 1\), got {level!r}$"):
            paired_bootstrap_diff([1.0, 2.0], [0.0, 1.0], level=level)


def test_defaults_are_95_percent_10000_resamples_seed_0() -> None:
    values, other = [0.61, 0.64, 0.66, 0.70, 0.58], [0.60, 0.60, 0.65, 0.62, 0.59]
    spread = np.random.default_rng(3).random(40).tolist()  # many distinct means: the interval moves with the draws
    assert bootstrap_ci(spread) == bootstrap_ci(spread, 0.95, 10000, 0)
    assert bootstrap_ci(spread) != bootstrap_ci(spread, 0.95, 10001, 0) != bootstrap_ci(spread, 0.95, 10000, 1)
    assert paired_bootstrap_diff(values, other) == paired_bootstrap_diff(values, other, 0.95, 10000, 0)
    x, y = list(range(9)), [3, 1, 4, 1, 5, 9, 2, 6, 5]  # 9! > 10,000: random permutations, seeded
    assert permutation_test_spearman(x, y) == permutation_test_spearman(x, y, 10000, 0)
    assert permutation_test_spearman(x, y)["p_value"] != permutation_test_spearman(x, y, 10000, 1)["p_value"]


def test_inputs_are_named_in_refusals_and_edges_are_quiet() -> None:
    for call, name in ((lambda v: mean_std(v), "values"), (lambda v: paired_bootstrap_diff(v, [1.0]), "a"),
                       (lambda v: paired_bootstrap_diff([1.0], v), "b"),
                       (lambda v: permutation_test_spearman(v, [1.0]), "x"),
                       (lambda v: permutation_test_spearman([1.0], v), "y")):  # fmt: skip
        with pytest.raises(ValueError, match=rf"^{name} must be one-dimensional, got shape \(1, 1\)$"):
            call([[1.0]])
    empty = paired_bootstrap_diff([], [])
    assert all(math.isnan(empty[k]) for k in ("mean_diff", "ci_low", "ci_high", "p_value"))
    assert bootstrap_ci([0.2, 0.4, 0.9], n_boot=1, seed=0) == pytest.approx(bootstrap_ci([0.2, 0.4, 0.9], n_boot=1))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        two = permutation_test_spearman([1.0, 2.0], [3.0, 5.0])  # ranks of norm 1/√2 < 1: still a correlation
        constant = permutation_test_spearman([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])
    assert two["rho"] == pytest.approx(1.0, abs=1e-12) and math.isnan(constant["rho"]) and math.isnan(constant["p_value"])


def test_random_sign_flips_are_seeded() -> None:
    """16 pairs have 65,536 sign flips, more than 10,000: the p comes from seeded random flips, the same every call."""
    rng = np.random.default_rng(4)
    a, b = rng.random(16), rng.random(16)
    first, again = paired_bootstrap_diff(a, b), paired_bootstrap_diff(a, b)
    assert first["p_value"] == again["p_value"] and first["p_value"] != paired_bootstrap_diff(a, b, seed=1)["p_value"]


def test_undefined_correlations_say_so_in_every_field() -> None:
    for x, y in (([1.0], [2.0]), ([1.0, 1.0, 1.0], [1.0, 2.0, 3.0])):  # one point; a constant input
        r = permutation_test_spearman(x, y)
        assert math.isnan(r["rho"]) and math.isnan(r["p_value"]) and r["exact"] is True
