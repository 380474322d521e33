"""The report's claim checks: a paper-like result replicates every claim, and each claim flips exactly where its
threshold says, whatever the other numbers are."""

from __future__ import annotations

import copy

import pytest

from peanchor.report import claims as C
from peanchor.report.claims import check_claims
from peanchor.results import SCHEMA_VERSION, results_from_dict

ALPHAS = (1.0, 0.75, 0.5, 0.25, 0.0)

# Per condition: SSDC in order and under RPI (4 layers), FS per shift. Paper-like: none/rpt collapse under RPI but
# have a ghost map in order; APE and sin-cos peak early; RoPE builds up; every PE model is clearly less fragile.
PAPER_LIKE = {
    "none": {"normal": [0.45, 0.30, 0.25, 0.20], "rpi": [0.02, 0.03, -0.02, 0.01], "fs": {"jpeg": 0.50, "blur": 0.60}},
    "rpt": {"normal": [0.40, 0.35, 0.30, 0.22], "rpi": [0.01, 0.02, 0.04, 0.03], "fs": {"jpeg": 0.48, "blur": 0.55}},
    "ape": {"normal": [0.6, 0.6, 0.5, 0.5], "rpi": [0.10, 0.45, 0.35, 0.30], "fs": {"jpeg": 0.30, "blur": 0.20}},
    "sincos": {"normal": [0.8, 0.7, 0.6, 0.6], "rpi": [0.90, 0.80, 0.70, 0.65], "fs": {"jpeg": 0.25, "blur": 0.15}},
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


def test_alpha_sweep_needs_rising_delta_and_falling_fs_over_usable_points():
    def sweep(delta, fs_blur, acc=(0.8, 0.8, 0.8, 0.8, 0.1)):
        return {a: {"delta": d, "acc": c, "fs": {"jpeg": 0.6 - 0.3 * a, "blur": f}}
                for a, d, f, c in zip(ALPHAS, delta, fs_blur, acc)}  # fmt: skip

    good = sweep([0.3, 0.2, 0.1, 0.0, 0.0], [0.2, 0.3, 0.4, 0.5, 0.0])
    assert _verdicts(_results(PAPER_LIKE, sweep=good))["alpha_sweep"] is True
    # FS that rises with α (the wrong way) at one shift fails the claim
    wrong_fs = sweep([0.3, 0.2, 0.1, 0.0, 0.0], [0.5, 0.4, 0.3, 0.2, 0.0])
    assert _verdicts(_results(PAPER_LIKE, sweep=wrong_fs))["alpha_sweep"] is False
    # a broken point (α = 0 at chance) is left out: its FS of 0 would otherwise reverse the trend
    broken_zero = sweep([0.3, 0.2, 0.1, 0.05, 0.0], [0.2, 0.3, 0.4, 0.5, -0.9])
    assert _verdicts(_results(PAPER_LIKE, sweep=broken_zero))["alpha_sweep"] is True
    # fewer than 3 usable points: not measured
    few = sweep([0.3, 0.2, 0.1, 0.0, 0.0], [0.2, 0.3, 0.4, 0.5, 0.6], acc=(0.8, 0.8, 0.1, 0.1, 0.1))
    assert _verdicts(_results(PAPER_LIKE, sweep=few))["alpha_sweep"] is None


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
    assert f"{len(low)} of the points have clean accuracy < 0.20, without them ρ = {expected:.2f}" in claim.evidence
    assert f"over {len(points) + len(low)} points" in claim.evidence  # the verdict's ρ is over every point
    # every point usable: nothing added
    claim = next(c for c in check_claims(results_from_dict(kept)) if c.key == "delta_fs")
    assert "without them" not in claim.evidence
