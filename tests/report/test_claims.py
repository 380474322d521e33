"""The report's claim checks: a paper-like result replicates every claim, and each claim flips exactly where its
threshold says, whatever the other numbers are."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
from scipy import stats

from peanchor.report import claims as C
from peanchor.report.claims import check_claims
from peanchor.results import SCHEMA_VERSION, results_from_dict

ALPHAS = (1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.0)  # six usable points (α = 0 is at chance): exact p of ρ = 1 is 2/720

# Per condition: SSDC in order and under RPI (4 layers), FS per shift. Paper-like: none/rpt collapse under RPI but
# have a ghost map in order; APE and sin-cos peak early; RoPE builds up; every PE model is clearly less fragile.
PAPER_LIKE = {
    "none": {"normal": [0.45, 0.30, 0.25, 0.20], "rpi": [0.02, 0.03, -0.02, 0.01], "fs": {"jpeg": 0.50, "blur": 0.60}},
    "rpt": {"normal": [0.40, 0.35, 0.30, 0.22], "rpi": [0.01, 0.02, 0.04, 0.03], "fs": {"jpeg": 0.48, "blur": 0.55}},
    "ape": {"normal": [0.6, 0.6, 0.5, 0.5], "rpi": [0.10, 0.45, 0.35, 0.30], "fs": {"jpeg": 0.30, "blur": 0.20}},
    "sincos": {"normal": [0.8, 0.7, 0.6, 0.6], "rpi": [0.30, 0.90, 0.70, 0.65], "fs": {"jpeg": 0.25, "blur": 0.15}},
    "rope": {"normal": [0.5, 0.5, 0.5, 0.5], "rpi": [0.05, 0.15, 0.30, 0.40], "fs": {"jpeg": 0.35, "blur": 0.25}},
}


def _results(spec: dict, seeds=(0, 1), sweep: dict | None = None) -> dict:
    models, rows = [], []
    for cond, s in spec.items():
        for seed in seeds:
            models.append({
                "name": f"{cond}-s{seed}", "condition": cond, "pe": "ape" if cond == "rpt" else cond,
                "rpt": cond == "rpt", "seed": seed, "clean_acc": 0.8, "rpi_acc": 0.5,
                "ssdc": {"normal": s["normal"], "rpi": s["rpi"], "rpi_std": [0.0] * 4},
                "delta_ssdc": s["rpi"][1] - s["rpi"][0],
                "acc": {k: 0.8 * (1 - v) for k, v in s["fs"].items()}, "fragility": dict(s["fs"]),
            })  # fmt: skip
    # The APE α sweep: ΔSSDC shrinks and FS grows as α falls, clean accuracy stays usable down to α = 0.25.
    sweep = sweep if sweep is not None else {a: {"delta": 0.35 * a, "acc": 0.8 if a > 0 else 0.1, "fs": {"jpeg": 0.6 - 0.3 * a, "blur": 0.5 - 0.3 * a}}
                      for a in ALPHAS}  # fmt: skip
    for seed in seeds:
        for a, p in sweep.items():
            rows.append({"model": f"ape-s{seed}", "condition": "ape", "seed": seed, "alpha": a, "delta_ssdc": p["delta"],
                         "ssdc_rpi": [0.1, 0.1 + p["delta"]], "clean_acc": p["acc"],
                         "acc": {k: p["acc"] * (1 - v) for k, v in p["fs"].items()}, "fragility": dict(p["fs"])})  # fmt: skip
    return {"schema": "peanchor.results", "schema_version": SCHEMA_VERSION, "models": models, "alpha_sweep": rows,
            "shifts": {"jpeg": {"kind": "jpeg", "quality": 10}, "blur": {"kind": "blur", "sigma": 1.0}}}  # fmt: skip


def _verdicts(doc: dict) -> dict[str, bool | None]:
    return {c.key: c.replicates for c in check_claims(results_from_dict(doc))}


def test_paper_like_results_replicate_every_claim():
    claims = check_claims(results_from_dict(_results(PAPER_LIKE)))
    assert [c.key for c in claims] == ["content_driven", "index_anchored", "early_peak", "gradual_build_up",
                                       "less_fragile", "alpha_sweep", "delta_fs"]  # fmt: skip
    assert {c.key: c.replicates for c in claims} == {c.key: True for c in claims}
    assert all(c.evidence and c.statement for c in claims)


def _edit(path: tuple, value):
    spec = copy.deepcopy(PAPER_LIKE)
    target = spec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return spec


@pytest.mark.parametrize(
    ("claim", "path", "passing", "failing"),
    [
        # none's SSDC under RPI at one layer: within ±NEAR_ZERO replicates, just outside does not
        ("content_driven", ("none", "rpi"), [0.02, C.NEAR_ZERO - 0.01, 0.0, 0.0], [0.02, C.NEAR_ZERO + 0.01, 0.0, 0.0]),
        ("content_driven", ("rpt", "rpi"), [-(C.NEAR_ZERO - 0.01), 0, 0, 0], [-(C.NEAR_ZERO + 0.01), 0, 0, 0]),
        # ... and a ghost map in order above GHOST_MAP at some layer
        ("content_driven", ("none", "normal"), [C.GHOST_MAP + 0.01, 0.1, 0.1, 0.1], [C.GHOST_MAP - 0.01, 0.1, 0.1, 0.1]),
        ("index_anchored", ("ape", "rpi"), [0.1, C.ANCHORED + 0.01, 0.2, 0.2], [0.1, C.ANCHORED - 0.01, 0.2, 0.2]),
        ("early_peak", ("ape", "rpi"), [0.1, 0.45, 0.44, 0.30], [0.1, 0.30, 0.45, 0.30]),  # peak at layer 1 vs 2
        ("gradual_build_up", ("rope", "rpi"), [0.05, 0.2, 0.3, 0.05 + C.BUILD_UP + 0.01],
         [0.05, 0.3, 0.3, 0.05 + C.BUILD_UP - 0.01]),
        # FS of a PE model against min(none, rpt) - FS_MARGIN, at one shift
        ("less_fragile", ("rope", "fs", "blur"), 0.55 - C.FS_MARGIN - 0.01, 0.55 - C.FS_MARGIN + 0.01),
        ("less_fragile", ("sincos", "fs", "jpeg"), 0.48 - C.FS_MARGIN - 0.01, 0.48 - C.FS_MARGIN + 0.01),
    ],
)
def test_each_claim_flips_at_its_threshold(claim, path, passing, failing):
    good, bad = _verdicts(_results(_edit(path, passing))), _verdicts(_results(_edit(path, failing)))
    assert good[claim] is True and bad[claim] is False
    # no other claim depends on the edited number's side of this threshold
    assert {k: v for k, v in good.items() if k not in (claim, "delta_fs")} == {
        k: v for k, v in bad.items() if k not in (claim, "delta_fs")
    }


# Six points in rank order 0..5 against α descending: ρ and the exact two-sided permutation p over the 720 pairings
# (scipy.stats.permutation_test over the pairings, checked in test_p_values_on_both_sides_are_scipys).
RHO_P_0_033 = (0, 1, 3, 2, 5, 4)  # ρ = 0.886, p = 24/720 = 0.033: below SIGNIFICANCE
RHO_P_0_058 = (0, 1, 2, 4, 5, 3)  # ρ = 0.829, p = 42/720 = 0.058: above it, although ρ has the right sign


def _sweep(delta, fs_blur, acc=(0.8,) * 6 + (0.1,)) -> dict:
    return {a: {"delta": d, "acc": c, "fs": {"jpeg": 0.6 - 0.3 * a, "blur": f}}
            for a, d, f, c in zip(ALPHAS, delta, fs_blur, acc)}  # fmt: skip


def _sweep_claim(sweep: dict) -> C.Claim:
    return next(c for c in check_claims(results_from_dict(_results(PAPER_LIKE, sweep=sweep))) if c.key == "alpha_sweep")


def _ranks_down(order: tuple[int, ...], scale: float = 0.1) -> list[float]:
    """Values over ALPHAS[:6] (α descending) whose ρ with α is the ρ of ``order`` against 0..5 (α rising)."""
    return [scale * v for v in reversed(order)] + [0.0]


GOOD_DELTA = [0.5, 0.4, 0.3, 0.2, 0.1, 0.05, 0.0]  # falls with α: ρ(α, ΔSSDC) = 1
GOOD_FS = [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.0]  # rises as α falls: ρ(α, FS) = −1 over the usable points


def test_alpha_sweep_needs_rising_delta_and_falling_fs_over_usable_points():
    assert _sweep_claim(_sweep(GOOD_DELTA, GOOD_FS)).replicates is True
    # FS that rises with α (the wrong way) at one shift fails the claim
    assert _sweep_claim(_sweep(GOOD_DELTA, GOOD_FS[5::-1] + [0.0])).replicates is False
    # ΔSSDC that falls with α fails it too
    assert _sweep_claim(_sweep(GOOD_DELTA[5::-1] + [0.0], GOOD_FS)).replicates is False
    # a broken point (α = 0 at chance) is left out: its FS of −0.9 would otherwise weaken the trend
    assert _sweep_claim(_sweep(GOOD_DELTA, GOOD_FS[:6] + [-0.9])).replicates is True


def test_alpha_sweep_reads_fs_only_from_points_at_or_above_sweep_min_acc():
    """α = 0 with a reversed FS: just below SWEEP_MIN_ACC it is left out (replicates), at it, it counts (seven
    points, one against the trend: ρ(α, FS blur) = −0.5, p > SIGNIFICANCE)."""
    reversed_zero = GOOD_FS[:6] + [-0.9]
    below = _sweep(GOOD_DELTA, reversed_zero, acc=(0.8,) * 6 + (C.SWEEP_MIN_ACC - 0.01,))
    at = _sweep(GOOD_DELTA, reversed_zero, acc=(0.8,) * 6 + (C.SWEEP_MIN_ACC,))
    assert _sweep_claim(below).replicates is True and _sweep_claim(below).evidence.startswith("6 α points")
    claim = _sweep_claim(at)
    assert claim.replicates is False and claim.evidence.startswith("7 α points")


def test_alpha_sweep_needs_min_points_usable_points():
    """MIN_POINTS usable points are measured (ρ = ±1 gives p = 2/5! < SIGNIFICANCE); one fewer is not measured,
    because no p of the exact test could fall below SIGNIFICANCE (2/4! = 0.083)."""
    assert 2 / math.factorial(C.MIN_POINTS - 1) >= C.SIGNIFICANCE > 2 / math.factorial(C.MIN_POINTS)
    enough = (0.8,) * C.MIN_POINTS + (0.1,) * (7 - C.MIN_POINTS)
    fewer = (0.8,) * (C.MIN_POINTS - 1) + (0.1,) * (8 - C.MIN_POINTS)
    assert _sweep_claim(_sweep(GOOD_DELTA, GOOD_FS, acc=enough)).replicates is True
    claim = _sweep_claim(_sweep(GOOD_DELTA, GOOD_FS, acc=fewer))
    assert claim.replicates is None and f"{C.MIN_POINTS - 1} usable α point(s) of 7" in claim.evidence


@pytest.mark.parametrize("which", ["delta", "fs"])
def test_alpha_sweep_needs_each_p_below_significance(which):
    """The right sign is not enough: each correlation's permutation p must be below SIGNIFICANCE."""
    def sweep(order):
        if which == "delta":
            return _sweep(_ranks_down(order), GOOD_FS)
        return _sweep(GOOD_DELTA, [-v for v in _ranks_down(order)[:6]] + [0.0])

    below, above = _sweep_claim(sweep(RHO_P_0_033)), _sweep_claim(sweep(RHO_P_0_058))
    assert below.replicates is True and above.replicates is False
    label = "ΔSSDC" if which == "delta" else "FS blur"
    assert f"ρ(α, {label}): ρ = {'' if which == 'delta' else '-'}0.89, p = 0.0333, n = 6" in below.evidence
    assert f"ρ(α, {label}): ρ = {'' if which == 'delta' else '-'}0.83, p = 0.0583, n = 6" in above.evidence


def test_alpha_sweep_evidence_is_scipys_rho_and_p_of_the_seed_means():
    """The evidence, computed by hand: mean over seeds per α, scipy's Spearman ρ, and the exact two-sided p as
    scipy.stats.permutation_test gives it over every pairing."""
    sweep = _sweep(_ranks_down(RHO_P_0_033), GOOD_FS)
    doc = _results(PAPER_LIKE, sweep=sweep, seeds=(0, 1, 2))
    for row in doc["alpha_sweep"]:  # seeds differ; their mean keeps the order
        row["delta_ssdc"] += 0.01 * row["seed"]
    claim = next(c for c in check_claims(results_from_dict(doc)) if c.key == "alpha_sweep")
    alphas = np.array(ALPHAS[:6])
    delta = np.array([np.mean([r["delta_ssdc"] for r in doc["alpha_sweep"] if r["alpha"] == a]) for a in alphas])
    rho = stats.spearmanr(alphas, delta).statistic
    p = stats.permutation_test((delta,), lambda d: abs(stats.spearmanr(alphas, d).statistic),
                               permutation_type="pairings", alternative="greater", n_resamples=np.inf).pvalue  # fmt: skip
    assert f"ρ(α, ΔSSDC): ρ = {rho:.2f}, p = {p:.3g}, n = 6" in claim.evidence


def test_claims_without_their_conditions_are_not_measured():
    only_none = {"none": PAPER_LIKE["none"]}
    verdicts = _verdicts(_results(only_none, sweep={}))
    assert verdicts["content_driven"] is True
    assert all(verdicts[k] is None for k in ("index_anchored", "early_peak", "gradual_build_up", "less_fragile",
                                             "alpha_sweep"))  # fmt: skip


def test_claims_use_the_mean_over_seeds():
    doc = _results(PAPER_LIKE)
    # seed 0's APE peaks below the threshold, seed 1's above: the mean decides
    for m in doc["models"]:
        if m["condition"] == "ape":
            m["ssdc"]["rpi"] = [0.1, C.ANCHORED - 0.02, 0.2, 0.2] if m["seed"] == 0 else [0.1, C.ANCHORED + 0.04, 0.2, 0.2]
    assert _verdicts(doc)["index_anchored"] is True


def test_delta_fs_evidence_gives_rho_without_the_points_near_chance():
    """The verdict uses every point; the evidence adds ρ over the points whose clean accuracy is usable, the same as
    leaving the near-chance α points out of the results altogether."""
    from scipy.stats import spearmanr

    from peanchor.report.summary import correlation_points

    doc = _results(PAPER_LIKE)
    low = [p for p in doc["alpha_sweep"] if p["clean_acc"] < C.SWEEP_MIN_ACC]
    assert low  # the fixture's α = 0 points are at chance
    kept = copy.deepcopy(doc)
    kept["alpha_sweep"] = [p for p in doc["alpha_sweep"] if p["clean_acc"] >= C.SWEEP_MIN_ACC]
    points = correlation_points(results_from_dict(kept))
    expected = spearmanr([p.delta_ssdc for p in points], [p.fs for p in points]).statistic
    claim = next(c for c in check_claims(results_from_dict(doc)) if c.key == "delta_fs")
    assert f"{len(low)} of the points have clean accuracy < 0.20, without them" in claim.evidence
    assert f"n = {len(points) + len(low)} points" in claim.evidence  # the verdict's ρ is over every point
    assert f"without them ρ = {expected:.2f}, p = " in claim.evidence and f"n = {len(points)}" in claim.evidence
    # every point usable: nothing added
    claim = next(c for c in check_claims(results_from_dict(kept)) if c.key == "delta_fs")
    assert "without them" not in claim.evidence


def _delta_fs_claim(pairs: list[tuple[float, float]]) -> C.Claim:
    """The ΔSSDC–FS claim over the given (ΔSSDC, FS) points: one seed of each condition, then α points of its APE."""
    spec = copy.deepcopy(PAPER_LIKE)
    conditions = list(spec)[: len(pairs)]
    spec = {c: spec[c] for c in conditions}
    for c, (delta, fs) in zip(conditions, pairs):
        spec[c]["rpi"] = [0.1, 0.1 + delta, 0.0, 0.0]
        spec[c]["fs"] = {"jpeg": fs, "blur": fs}
    sweep = {0.5 - 0.1 * i: {"delta": d, "acc": 0.8, "fs": {"jpeg": f, "blur": f}} for i, (d, f) in enumerate(pairs[5:])}
    return next(c for c in check_claims(results_from_dict(_results(spec, seeds=(0,), sweep=sweep))) if c.key == "delta_fs")


@pytest.mark.parametrize(
    ("order", "verdict", "evidence"),
    [
        ((0, 1, 2, 3, 4, 5), True, "ρ = -1.00, p = 0.00278, n = 6"),
        (RHO_P_0_033, True, "ρ = -0.89, p = 0.0333, n = 6"),  # p just below SIGNIFICANCE
        (RHO_P_0_058, False, "ρ = -0.83, p = 0.0583, n = 6"),  # negative, but p just above it
    ],
)
def test_delta_fs_needs_a_negative_rho_with_p_below_significance(order, verdict, evidence):
    claim = _delta_fs_claim([(0.1 * i, 0.5 - 0.05 * v) for i, v in enumerate(order)])
    assert claim.replicates is verdict and evidence in claim.evidence


def test_delta_fs_needs_the_expected_sign_and_min_points():
    rising = _delta_fs_claim([(0.1 * i, 0.1 + 0.05 * i) for i in range(6)])  # ρ = +1, p = 0.003: the wrong sign
    assert rising.replicates is False and "ρ = 1.00, p = 0.00278, n = 6" in rising.evidence
    enough = _delta_fs_claim([(0.1 * i, 0.5 - 0.05 * i) for i in range(C.MIN_POINTS)])
    assert enough.replicates is True and f"p = {2 / math.factorial(C.MIN_POINTS):.3g}, n = {C.MIN_POINTS}" in enough.evidence
    fewer = _delta_fs_claim([(0.1 * i, 0.5 - 0.05 * i) for i in range(C.MIN_POINTS - 1)])
    assert fewer.replicates is None and f"{C.MIN_POINTS - 1} point(s)" in fewer.evidence


def test_p_values_on_both_sides_are_scipys():
    """The two orders the threshold tests use, against scipy.stats.permutation_test over all 720 pairings."""
    x = np.arange(6.0)
    for order, expected in ((RHO_P_0_033, 24 / 720), (RHO_P_0_058, 42 / 720)):
        y = np.array(order, dtype=float)
        res = stats.permutation_test((y,), lambda v: abs(stats.spearmanr(x, v).statistic), permutation_type="pairings",
                                     alternative="greater", n_resamples=np.inf)  # fmt: skip
        assert res.pvalue == pytest.approx(expected, abs=1e-12)
        assert bool(res.pvalue < C.SIGNIFICANCE) is (order == RHO_P_0_033)


def test_less_fragile_evidence_is_numpys_means_and_scipys_paired_ci():
    """With three seeds: the FS cells are numpy's mean over seeds, the paired CI of FS(ape) − FS(none) is scipy's
    percentile bootstrap of the per-seed differences (10,000 resamples, seed 0)."""
    doc = _results(PAPER_LIKE, seeds=(0, 1, 2))
    for m in doc["models"]:
        m["fragility"] = {k: v + 0.013 * m["seed"] * (1 if m["condition"] == "ape" else -1) for k, v in m["fragility"].items()}
    claim = next(c for c in check_claims(results_from_dict(doc)) if c.key == "less_fragile")
    fs = {c: np.array([m["fragility"]["jpeg"] for m in doc["models"] if m["condition"] == c]) for c in ("none", "ape")}
    assert f"`none` {fs['none'].mean():.3f}" in claim.evidence and f"`ape` {fs['ape'].mean():.3f}" in claim.evidence
    diff = fs["ape"] - fs["none"]
    ci = stats.bootstrap((diff,), np.mean, n_resamples=10000, confidence_level=0.95, method="percentile",
                         rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
    assert f"ape − none {diff.mean():+.3f} [{ci.low:+.3f}, {ci.high:+.3f}]" in claim.evidence


def test_delta_fs_evidence_when_no_point_is_usable():
    doc = _results(PAPER_LIKE)
    for row in [*doc["models"], *doc["alpha_sweep"]]:
        row["clean_acc"] = C.SWEEP_MIN_ACC / 2  # every point near chance
    claim = next(c for c in check_claims(results_from_dict(doc)) if c.key == "delta_fs")
    assert claim.evidence.endswith("without them ρ = —, p = —, n = 0")


# The report prints these words: every statement and every piece of evidence, to the letter, for the paper-like
# results with three seeds and for results with `none` alone (what "not measured" says).
GOLDEN_FULL = [
    ('content_driven',
     ('Without a positional encoding (and with RPT) the spatial structure is content-driven: SSDC with '
      'the tokens in order exceeds 0.20 at some layer, and under RPI it stays within ±0.10 at every '
      'layer.'),
     ('`none`: under RPI 0.02 0.03 -0.02 0.01; in order 0.45 0.30 0.25 0.20; `rpt`: under RPI 0.01 0.02'
      ' 0.04 0.03; in order 0.40 0.35 0.30 0.22')),
    ('index_anchored',
     ('Every positional encoding anchors the structure to the token indices: its SSDC under RPI peaks '
      'at ≥ 0.25.'),
     '`ape` peaks at 0.45; `sincos` peaks at 0.90; `rope` peaks at 0.40'),
    ('early_peak',
     ('The absolute encodings (APE, sin-cos) are anchored from the start: their SSDC under RPI peaks in'
      ' the first half of the layers.'),
     '`ape` peaks at layer 1 of 0–3; `sincos` peaks at layer 1 of 0–3'),
    ('gradual_build_up',
     ("RoPE builds its anchored structure up with depth: its last layer's SSDC under RPI is ≥ 0.10 "
      "above layer 0's."),
     '`rope` under RPI 0.05 0.15 0.30 0.40 (last − first +0.35)'),
    ('less_fragile',
     ("Positional encodings make the model less fragile: at every shift, each PE model's FS is at least"
      " 0.05 below both the ablated model's and RPT's."),
     ('jpeg: `none` 0.500, `rpt` 0.480, `ape` 0.300, `sincos` 0.250, `rope` 0.350 (paired 95% CI: ape −'
      ' none -0.200 [-0.200, -0.200]; sincos − none -0.250 [-0.250, -0.250]; rope − none -0.150 '
      '[-0.150, -0.150]); blur: `none` 0.600, `rpt` 0.550, `ape` 0.200, `sincos` 0.150, `rope` 0.250 '
      '(paired 95% CI: ape − none -0.400 [-0.400, -0.400]; sincos − none -0.450 [-0.450, -0.450]; rope '
      '− none -0.350 [-0.350, -0.350])')),
    ('alpha_sweep',
     ('Scaling the learned APE down (α < 1) removes anchored structure and makes the model more '
      'fragile: over the α points with clean accuracy ≥ 0.2, ΔSSDC rises with α and FS falls with α '
      '(Spearman ρ, each with permutation p < 0.05).'),
     ('6 α points (0.1, 0.2, 0.4, 0.6, 0.8, 1): ρ(α, ΔSSDC): ρ = 1.00, p = 0.00278, n = 6; ρ(α, FS '
      'jpeg): ρ = -1.00, p = 0.00278, n = 6; ρ(α, FS blur): ρ = -1.00, p = 0.00278, n = 6')),
    ('delta_fs',
     ('More index-anchored structure goes with less fragility: ΔSSDC and FS correlate negatively '
      '(Spearman ρ < 0, permutation p < 0.05).'),
     ('Spearman ρ = -0.86, p = 0.0001 (10,000 permutations), n = 33 points (FS jpeg); 3 of the points '
      'have clean accuracy < 0.20, without them ρ = -0.81, p = 0.0001 (10,000 permutations), n = 30')),
]
GOLDEN_NONE_ONLY = [
    ('content_driven',
     ('Without a positional encoding (and with RPT) the spatial structure is content-driven: SSDC with '
      'the tokens in order exceeds 0.20 at some layer, and under RPI it stays within ±0.10 at every '
      'layer.'),
     '`none`: under RPI 0.02 0.03 -0.02 0.01; in order 0.45 0.30 0.25 0.20'),
    ('index_anchored',
     ('Every positional encoding anchors the structure to the token indices: its SSDC under RPI peaks '
      'at ≥ 0.25.'),
     'not measured'),
    ('early_peak',
     ('The absolute encodings (APE, sin-cos) are anchored from the start: their SSDC under RPI peaks in'
      ' the first half of the layers.'),
     'not measured'),
    ('gradual_build_up',
     'RoPE builds its anchored structure up with depth.',
     'not measured'),
    ('less_fragile',
     ("Positional encodings make the model less fragile: at every shift, each PE model's FS is at least"
      " 0.05 below both the ablated model's and RPT's."),
     'not measured'),
    ('alpha_sweep',
     ('Scaling the learned APE down (α < 1) removes anchored structure and makes the model more '
      'fragile: over the α points with clean accuracy ≥ 0.2, ΔSSDC rises with α and FS falls with α '
      '(Spearman ρ, each with permutation p < 0.05).'),
     '0 usable α point(s) of 0, fewer than 5: no permutation p can fall below 0.05; not measured'),
    ('delta_fs',
     ('More index-anchored structure goes with less fragility: ΔSSDC and FS correlate negatively '
      '(Spearman ρ < 0, permutation p < 0.05).'),
     '2 point(s), fewer than 5 or constant values: not measured'),
]


def test_the_claims_read_exactly_as_the_report_prints_them():
    full = check_claims(results_from_dict(_results(PAPER_LIKE, seeds=(0, 1, 2))))
    assert [(c.key, c.statement, c.evidence) for c in full] == GOLDEN_FULL
    alone = check_claims(results_from_dict(_results({"none": PAPER_LIKE["none"]}, sweep={})))
    assert [(c.key, c.statement, c.evidence) for c in alone] == GOLDEN_NONE_ONLY


@pytest.mark.parametrize(
    ("claim", "path", "at", "verdict"),
    [
        ("content_driven", ("none", "rpi"), [0.0, C.NEAR_ZERO, 0.0, 0.0], True),  # within ±NEAR_ZERO includes it
        ("content_driven", ("none", "normal"), [C.GHOST_MAP, 0.1, 0.1, 0.1], False),  # "exceeds" excludes it
        ("index_anchored", ("ape", "rpi"), [0.1, C.ANCHORED, 0.2, 0.2], True),  # "≥ ANCHORED"
        ("gradual_build_up", ("rope", "rpi"), [0.0, 0.05, 0.05, C.BUILD_UP], True),  # "≥ layer 0's + BUILD_UP"
    ],
)
def test_each_threshold_itself_falls_on_its_documented_side(claim, path, at, verdict):
    assert _verdicts(_results(_edit(path, at)))[claim] is verdict


def test_early_peak_is_the_first_half_of_any_depth():
    """Six layers: a peak at layer 2 is in the first half, at layer 3 it is not."""
    spec = {c: dict(PAPER_LIKE[c]) for c in PAPER_LIKE}
    for c, s in spec.items():
        s["normal"], s["rpi"] = s["normal"] + s["normal"][-2:], s["rpi"] + s["rpi"][-2:]
    spec["sincos"]["rpi"] = [0.3, 0.5, 0.9, 0.7, 0.6, 0.6]
    assert _verdicts(_results(spec))["early_peak"] is True
    spec["sincos"]["rpi"] = [0.3, 0.5, 0.7, 0.9, 0.6, 0.6]
    claim = next(c for c in check_claims(results_from_dict(_results(spec))) if c.key == "early_peak")
    assert claim.replicates is False and "`sincos` peaks at layer 3 of 0–5" in claim.evidence


def test_a_shift_no_model_of_a_condition_measured_reads_as_a_gap():
    doc = _results(PAPER_LIKE)
    for m in doc["models"]:
        if m["condition"] == "rope":
            del m["fragility"]["blur"]
    claim = next(c for c in check_claims(results_from_dict(doc)) if c.key == "less_fragile")
    assert "`rope` —" in claim.evidence


def test_alpha_sweep_p_is_the_seeded_permutation_p_for_many_points():
    """Nine α points (9! > 10,000 pairings): the p is that of 10,000 permutations drawn with seed 0."""
    from peanchor.metrics.stats import permutation_test_spearman

    alphas = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2]
    delta = [0.40, 0.20, 0.35, 0.10, 0.30, 0.05, 0.25, 0.15, 0.0]  # a middling ρ: its p depends on the draws
    sweep = {a: {"delta": d, "acc": 0.8, "fs": {"jpeg": 0.6 - 0.3 * a, "blur": 0.5 - 0.3 * a}} for a, d in zip(alphas, delta)}
    claim = _sweep_claim(sweep)
    expected = permutation_test_spearman(sorted(alphas), [d for _, d in sorted(zip(alphas, delta))], 10000, 0)
    assert f"ρ(α, ΔSSDC): ρ = {expected['rho']:.2f}, p = {expected['p_value']:.3g} (10,000 permutations), n = 9" in claim.evidence


def test_claims_without_any_no_pe_condition_and_a_pe_worse_than_none():
    """No `none` or `rpt`: the content claim is not measured. A PE model more fragile than `none` prints a positive
    paired difference with its sign; an FS exactly FS_MARGIN below the baseline still counts as "at least"."""
    only_pes = {c: PAPER_LIKE[c] for c in ("ape", "sincos", "rope")}
    claim = next(c for c in check_claims(results_from_dict(_results(only_pes))) if c.key == "content_driven")
    assert claim.replicates is None and claim.evidence == "not measured"
    doc = _results(_edit(("rope", "fs", "jpeg"), 0.6), seeds=(0, 1, 2))
    claim = next(c for c in check_claims(results_from_dict(doc)) if c.key == "less_fragile")
    assert "rope − none +0.100 [+0.100, +0.100]" in claim.evidence and claim.replicates is False
    tie = _edit(("sincos", "fs", "jpeg"), 0.48 - C.FS_MARGIN)  # rpt's 0.48 is the lower baseline
    assert _verdicts(_results(tie))["less_fragile"] is True
