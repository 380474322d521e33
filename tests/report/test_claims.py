"""The report's claim checks: three-valued verdicts read from intervals (over images at n = 1, over seeds from
n = 2), every condition a claim states checked, degenerate points excluded and named, no p-value from points that
are not independent."""

from __future__ import annotations

import copy
import math

import pytest
from scipy import stats

from peanchor.report import claims as C
from peanchor.report.claims import check_claims, model_correlation
from peanchor.report.evidence import DOES_NOT_REPLICATE, INCONCLUSIVE, NOT_MEASURED, REPLICATES, over_seeds
from peanchor.results.records import results_from_dict
from tests.helpers.claim_results import ALPHAS, PAPER_LIKE, claim_results

_results = claim_results

def _claims(doc: dict) -> dict[str, C.Claim]:
    return {c.key: c for c in check_claims(results_from_dict(doc))}


def _verdicts(doc: dict) -> dict[str, str]:
    return {k: c.verdict for k, c in _claims(doc).items()}


def _edit(path: tuple, value, spec=PAPER_LIKE) -> dict:
    spec = copy.deepcopy(spec)
    target = spec
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return spec


def test_paper_like_results_replicate_every_claim_but_the_five_point_correlation():
    claims = check_claims(results_from_dict(_results(PAPER_LIKE)))
    assert [c.key for c in claims] == ["content_driven", "index_anchored", "early_peak", "gradual_build_up",
                                       "less_fragile", "alpha_sweep", "delta_fs"]  # fmt: skip
    verdicts = {c.key: c.verdict for c in claims}
    assert verdicts == {**{c.key: REPLICATES for c in claims}, "delta_fs": verdicts["delta_fs"]}
    assert all(c.evidence and c.statement and c.title for c in claims)
    assert all(c.replicates is True for c in claims if c.key != "delta_fs")


@pytest.mark.parametrize("seeds", [(0,), (0, 1, 2)])
@pytest.mark.parametrize(
    ("claim", "path", "passing", "failing", "straddling"),
    [
        # none's SSDC under RPI at one layer against ±NEAR_ZERO (the interval is ±0.02 at n = 1)
        ("content_driven", ("none", "rpi"), [0.02, C.NEAR_ZERO - 0.05, 0, 0], [0.02, C.NEAR_ZERO + 0.05, 0, 0],
         [0.02, C.NEAR_ZERO, 0, 0]),
        ("content_driven", ("none", "normal"), [C.GHOST_MAP + 0.05, 0.1, 0.1, 0.1], [C.GHOST_MAP - 0.05, 0.1, 0.1, 0.1],
         [C.GHOST_MAP, 0.1, 0.1, 0.1]),
        ("index_anchored", ("ape", "rpi"), [0.1, C.ANCHORED + 0.05, 0.2, 0.2], [0.1, C.ANCHORED - 0.05, 0.2, 0.2],
         [0.1, C.ANCHORED, 0.2, 0.2]),
        ("early_peak", ("ape", "rpi"), [0.1, 0.45, 0.35, 0.30], [0.1, 0.30, 0.45, 0.30], [0.1, 0.45, 0.44, 0.30]),
        ("gradual_build_up", ("rope", "rpi"), [0.30, 0.3, 0.3, 0.30 + C.BUILD_UP + 0.06],
         [0.30, 0.3, 0.3, 0.30 + C.BUILD_UP - 0.06], [0.30, 0.3, 0.3, 0.30 + C.BUILD_UP]),
        ("less_fragile", ("rope", "fs", "blur"), 0.55 - C.FS_MARGIN - 0.06, 0.55 - C.FS_MARGIN + 0.06,
         0.55 - C.FS_MARGIN),
    ],
)
def test_each_claim_replicates_fails_or_is_inconclusive_by_its_interval(seeds, claim, path, passing, failing,
                                                                        straddling):  # fmt: skip
    verdicts = [_verdicts(_results(_edit(path, v), seeds=seeds))[claim] for v in (passing, failing, straddling)]
    assert verdicts == [REPLICATES, DOES_NOT_REPLICATE, INCONCLUSIVE]


def test_without_an_interval_a_single_seed_is_inconclusive_and_says_so():
    claims = _claims(_results(PAPER_LIKE, seeds=(0,), half=None))
    for key in ("content_driven", "index_anchored", "early_peak", "gradual_build_up", "less_fragile"):
        assert claims[key].verdict == INCONCLUSIVE, key
    assert "(no interval)" in claims["index_anchored"].evidence


def test_an_early_peak_of_an_unanchored_encoding_does_not_replicate():
    """The demo's APE peaked at −0.10 under RPI in its first layer: an early peak of nothing is no early peak."""
    spec = _edit(("ape", "rpi"), [-0.10, -0.12, -0.2, -0.3])
    claims = _claims(_results(spec, seeds=(0,)))
    assert claims["early_peak"].verdict == DOES_NOT_REPLICATE
    evidence = claims["early_peak"].evidence
    assert "`ape` is not anchored" in evidence and "condition is not met" in evidence
    assert claims["index_anchored"].verdict == DOES_NOT_REPLICATE
    # anchored only within the interval's reach: inconclusive, whatever the position of the peak
    spec = _edit(("ape", "rpi"), [0.1, C.ANCHORED - 0.01, 0.2, 0.2])
    assert _verdicts(_results(spec, seeds=(0,)))["early_peak"] == INCONCLUSIVE


def test_rope_must_be_anchored_to_build_up():
    spec = _edit(("rope", "rpi"), [-0.2, -0.1, 0.0, 0.05])  # rises by 0.25, but never anchored
    claim = _claims(_results(spec, seeds=(0,)))["gradual_build_up"]
    assert claim.verdict == DOES_NOT_REPLICATE and "anchored: does not replicate" in claim.evidence


def test_over_seeds_the_verdict_reads_the_t_interval_of_the_seeds():
    """Seed-to-seed variation enters: three seeds that each clear ANCHORED by their own interval but disagree."""
    spec = copy.deepcopy(PAPER_LIKE)
    doc = _results(spec, seeds=(0, 1, 2))
    for m, peak in zip([m for m in doc["models"] if m["condition"] == "ape"], (0.60, 0.26, 0.15)):
        m["ssdc"]["rpi"] = [0.1, peak, 0.1, 0.1]
    claim = _claims(doc)["index_anchored"]
    assert claim.verdict == INCONCLUSIVE and "layer 1: 0.34 [" in claim.evidence


def test_fs_undefined_reads_as_undefined_with_its_reason_never_a_number():
    spec = _edit(("rope", "undefined"), "clean accuracy 0.10 not above chance 0.10 by its interval")
    claim = _claims(_results(spec, seeds=(0,)))["less_fragile"]
    assert claim.verdict == INCONCLUSIVE
    assert "`rope` undefined (clean accuracy 0.10 not above chance 0.10 by its interval)" in claim.evidence
    assert "rope nan" not in claim.evidence.lower()


def test_delta_fs_uses_one_point_per_trained_model_and_no_p_value():
    """The pooled Spearman over α points of the same models is gone: five models, five points, a Fisher-z
    interval (Bonett–Wright) that at n = 5 cannot exclude 0 unless ρ is ±1."""
    doc = _results(PAPER_LIKE, seeds=(0,))
    doc["models"][4]["fragility"]["jpeg"] = 0.49  # rope: ρ away from −1
    shift, rho, left = model_correlation(results_from_dict(doc))
    xs = [m["delta_ssdc"] for m in doc["models"]]
    ys = [m["fragility"]["jpeg"] for m in doc["models"]]
    expected = stats.spearmanr(xs, ys).statistic
    z, half = math.atanh(expected), 1.96 * math.sqrt((1 + expected**2 / 2) / (len(xs) - 3))
    assert (shift, rho.n, left) == ("jpeg", 5, [])
    assert (rho.value, rho.low, rho.high) == pytest.approx((expected, math.tanh(z - half), math.tanh(z + half)))
    claim = _claims(doc)["delta_fs"]
    assert "p =" not in claim.evidence and "over 5 trained models at α = 1" in claim.evidence
    assert claim.verdict == (DOES_NOT_REPLICATE if rho.low > 0 else REPLICATES if rho.high < 0 else INCONCLUSIVE)


def test_delta_fs_names_what_it_leaves_out_and_needs_five_models():
    spec = _edit(("none", "undefined"), "clean accuracy at chance")
    claim = _claims(_results(spec, seeds=(0,)))["delta_fs"]
    assert claim.verdict == INCONCLUSIVE
    assert claim.evidence.startswith("4 trained model(s), fewer than 5") and "none-s0: FS undefined" in claim.evidence


def _trend(slope: float, half: float, excluded: dict | None = None) -> dict:
    return {"slope": slope, "ci": [slope - half, slope + half], "alphas": list(ALPHAS), "excluded": excluded or {}}


@pytest.mark.parametrize(("delta", "fs", "verdict"), [
    (0.3, -0.3, REPLICATES), (-0.3, -0.3, DOES_NOT_REPLICATE), (0.3, 0.3, DOES_NOT_REPLICATE),
    (0.05, -0.3, INCONCLUSIVE),  # ΔSSDC's slope interval [-0.05, 0.15] holds 0
])  # fmt: skip
def test_alpha_sweep_reads_the_trends_intervals_at_one_seed(delta, fs, verdict):
    trends = {"delta_ssdc": _trend(delta, 0.1, {"0": "clean accuracy at chance"}),
              "fragility.jpeg": _trend(fs, 0.1), "fragility.blur": _trend(fs, 0.1)}  # fmt: skip
    claim = _claims(_results(PAPER_LIKE, seeds=(0,), trends=trends))["alpha_sweep"]
    assert claim.verdict == verdict
    assert "excluded: ape-s0 α = 0: clean accuracy at chance" in claim.evidence


def test_alpha_sweep_over_seeds_is_the_t_interval_of_the_seeds_slopes():
    doc = _results(PAPER_LIKE, seeds=(0, 1, 2), trends={"delta_ssdc": _trend(0.3, 0.01)})
    slopes = [0.3, 0.4, -0.2]
    for m, s in zip([m for m in doc["models"] if m["condition"] == "ape"], slopes):
        m["alpha_trends"] = {"delta_ssdc": _trend(s, 0.01), "fragility.jpeg": _trend(-0.3, 0.01),
                             "fragility.blur": _trend(-0.3, 0.01)}  # fmt: skip
    claim = _claims(doc)["alpha_sweep"]
    iv = over_seeds(slopes)
    assert claim.verdict == INCONCLUSIVE and f"ΔSSDC along α {iv.text(3, True)}" in claim.evidence


def test_alpha_points_identical_by_construction_are_excluded_and_named():
    """Under pe_zero every α point is the same model: no trend to read, not a perfect correlation."""
    flat = {a: {"delta": 0.0, "acc": 0.5, "fs": {"jpeg": 0.3, "blur": 0.3}} for a in ALPHAS}
    doc = _results(PAPER_LIKE, seeds=(0,), sweep=flat)
    for row in doc["alpha_sweep"]:
        row["delta_ssdc"], row["fragility"] = 0.0, {"jpeg": 0.3, "blur": 0.3}
    claim = _claims(doc)["alpha_sweep"]
    assert claim.verdict == NOT_MEASURED
    assert "identical by construction" in claim.evidence and "ape-s0" in claim.evidence


def test_an_older_file_without_trends_uses_the_slope_over_usable_points_without_an_interval():
    claim = _claims(_results(PAPER_LIKE, seeds=(0,)))["alpha_sweep"]
    assert claim.verdict == INCONCLUSIVE and "(no interval)" in claim.evidence
    assert "ape-s0 α = 0: clean accuracy 0.10 at chance" in claim.evidence  # excluded and named


def test_claims_without_their_conditions_are_not_measured():
    only_none = {"none": PAPER_LIKE["none"]}
    verdicts = _verdicts(_results(only_none, seeds=(0,)))
    assert verdicts["content_driven"] == REPLICATES
    for key in ("index_anchored", "early_peak", "gradual_build_up", "less_fragile", "alpha_sweep"):
        assert verdicts[key] == NOT_MEASURED, key


def test_the_scope_of_a_verdict_at_one_seed_is_these_trained_models():
    assert "about these trained models" in C.claims_scope(results_from_dict(_results(PAPER_LIKE, seeds=(0,))))
    assert "seed-to-seed variation is in them" in C.claims_scope(results_from_dict(_results(PAPER_LIKE)))


def test_an_alpha_sweep_with_too_few_usable_points_is_inconclusive_and_says_why():
    sweep = {a: {"delta": 0.35 * a, "acc": 0.8 if a > 0.7 else 0.1, "fs": {"jpeg": 0.3, "blur": 0.3}} for a in ALPHAS}
    claim = _claims(_results(PAPER_LIKE, seeds=(0,), sweep=sweep))["alpha_sweep"]
    assert claim.verdict == INCONCLUSIVE
    assert claim.evidence.startswith("fewer than 3 usable α points, no trend to read: ape-s0 α = 0.6: clean accuracy")


def test_a_trend_without_a_slope_or_interval_reads_as_such():
    trends = {"delta_ssdc": {"slope": None, "ci": None, "alphas": [], "excluded": {"1": "at chance", "0": "at chance"}}}
    claim = _claims(_results(PAPER_LIKE, seeds=(0,), trends=trends))["alpha_sweep"]
    assert claim.verdict == INCONCLUSIVE and "ape-s0 α = 1: at chance" in claim.evidence
    no_interval = {"slope": -0.2, "ci": [None, None], "alphas": list(ALPHAS), "excluded": {}}
    trends = {"delta_ssdc": _trend(0.3, 0.1), "fragility.jpeg": no_interval, "fragility.blur": _trend(-0.3, 0.1)}
    claim = _claims(_results(PAPER_LIKE, seeds=(0,), trends=trends))["alpha_sweep"]
    assert claim.verdict == INCONCLUSIVE and "of FS jpeg -0.200 (no interval)" in claim.evidence


@pytest.mark.parametrize(("jpeg", "verdict"), [
    # ΔSSDC: none = rpt (0.01) < rope (0.10) < ape (0.35) < sincos (0.60)
    ((0.50, 0.48, 0.30, 0.25, 0.35), REPLICATES),  # FS falling as ΔSSDC rises: ρ = −0.97
    ((0.10, 0.12, 0.30, 0.35, 0.20), DOES_NOT_REPLICATE),  # FS rising with it: ρ = +0.97
    ((0.30, 0.48, 0.50, 0.25, 0.35), INCONCLUSIVE),  # ρ = −0.21: five models cannot exclude 0
])  # fmt: skip
def test_delta_fs_replicates_fails_or_is_inconclusive_by_rhos_interval(jpeg, verdict):
    spec = copy.deepcopy(PAPER_LIKE)
    for cond, fs in zip(("none", "rpt", "ape", "sincos", "rope"), jpeg):
        spec[cond]["fs"]["jpeg"] = fs
    assert _verdicts(_results(spec, seeds=(0,)))["delta_fs"] == verdict
