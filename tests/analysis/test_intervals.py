"""The analysis's intervals: FS undefined at chance (with its reason) and paired otherwise, the trends along α against
numpy's least squares replicate by replicate, degenerate points left out and named, and an analysis under pe_zero
whose α points are one model."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.intervals import Estimate, Resampler, alpha_trend, chance_reason, least_squares_slope
from peanchor.metrics.bootstrap import GroupBootstrap, bootstrap_counts

from tests.analysis.test_evaluate import INFO, quadrant_images
from tests.helpers.builders import plan


def _boot(groups: int = 10, replicates: int = 200) -> GroupBootstrap:
    return GroupBootstrap(groups, bootstrap_counts(groups, replicates, seed=0))


def test_fs_is_undefined_when_the_clean_accuracy_is_not_above_chance_by_its_interval():
    resampler = Resampler(_boot(), num_images=40, chance=0.25)
    at_chance = resampler.accuracy(12, torch.tensor([2, 1, 1, 2, 1, 1, 1, 1, 1, 1]))  # 0.3, interval reaching 0.25
    assert resampler.interval(at_chance)[0] <= 0.25
    fs, why = resampler.fragility(at_chance, resampler.accuracy(8, torch.full((10,), 0)))
    assert math.isnan(fs.value) and fs.replicates is None and why.startswith("clean accuracy 0.300 [")
    good = resampler.accuracy(36, torch.tensor([4, 4, 4, 3, 4, 4, 3, 4, 3, 3]))
    shifted = resampler.accuracy(20, torch.tensor([2, 2, 2, 2, 2, 2, 2, 2, 2, 2]))
    fs, why = resampler.fragility(good, shifted)
    assert why is None and fs.value == 1 - 0.5 / 0.9
    # paired: FS of each replicate from the same resample's clean and shifted accuracies
    torch.testing.assert_close(fs.replicates, 1 - shifted.replicates / good.replicates, rtol=0, atol=0)
    assert chance_reason(0.24, None, 0.25) == "clean accuracy 0.240 is not above chance (0.250)"
    assert chance_reason(0.26, None, 0.25) is None and chance_reason(0.9, [0.8, 1.0], None) is None


def test_the_slope_along_alpha_and_its_interval_are_numpys_least_squares_per_replicate():
    g = torch.Generator().manual_seed(0)
    alphas = [1.0, 0.5, 0.25, 0.0]
    reps = {a: torch.randn(200, generator=g, dtype=torch.float64) * 0.1 + 2 * a for a in alphas}
    points = {a: Estimate(2 * a + 0.01 * i, reps[a]) for i, a in enumerate(alphas)}
    boot = _boot()
    trend = alpha_trend(points, {0.25: "identical to α = 1: α does not reach this model"}, boot)
    kept = [1.0, 0.5, 0.0]
    assert trend.alphas == kept and trend.excluded == {"0.25": "identical to α = 1: α does not reach this model"}
    assert trend.slope == pytest.approx(np.polyfit(kept, [points[a].value for a in kept], 1)[0], abs=1e-12)
    slopes = [np.polyfit(kept, [reps[a][r].item() for a in kept], 1)[0] for r in range(200)]
    assert trend.ci == pytest.approx(np.percentile(slopes, [2.5, 97.5]).tolist(), abs=1e-10)
    undefined = alpha_trend({1.0: Estimate(0.5), 0.5: Estimate(math.nan)}, {}, None)
    assert math.isnan(undefined.slope) and undefined.ci is None and undefined.excluded == {"0.5": "undefined here"}
    assert least_squares_slope(torch.tensor([1.0]), torch.tensor([3.0])).isnan().all()


def test_under_pe_zero_every_alpha_is_one_model_and_no_trend_is_fitted(micro):
    images, labels = quadrant_images(40, seed=2)
    evalset = EvalSet.from_tensors(images, labels, INFO)
    r = evaluate_model(micro("ape", num_classes=4), evalset, plan(alphas=(1.0, 0.5, 0.0), interventions=["pe_zero"],
                                                                  batch_size=20), info=INFO, device="cpu", progress=False)
    assert set(r.alpha_trends) == {"delta_ssdc", "clean_acc", "fragility.jpeg", "fragility.blur"}
    for trend in r.alpha_trends.values():
        assert trend.alphas == [] and math.isnan(trend.slope) and trend.ci is None
        assert set(trend.excluded) == {"1.0", "0.5", "0.0"} and "pe_zero" in trend.excluded["0.5"]
    # identical by construction indeed: every point measures the same
    assert len({(p.delta_ssdc, p.clean_acc) for p in r.alpha_sweep}) == 1


def test_a_trained_model_has_trends_with_intervals(micro, fit_briefly):
    images, labels = quadrant_images(256, seed=0)
    model = fit_briefly(micro("ape", num_classes=4), images, labels, INFO)
    test_images, test_labels = quadrant_images(96, seed=1)
    r = evaluate_model(model, EvalSet.from_tensors(test_images, test_labels, INFO), plan(alphas=(1.0, 0.5, 0.0),
                       batch_size=48), info=INFO, device="cpu", progress=False)  # fmt: skip
    trend = r.alpha_trends["clean_acc"]
    assert trend.alphas == [1.0, 0.5, 0.0] and trend.ci[0] <= trend.slope <= trend.ci[1]
    assert r.clean_acc_ci[0] <= r.clean_acc <= r.clean_acc_ci[1] and r.ci_level == 0.95 and r.chance == 0.25
    assert r.delta_ssdc_ci[0] <= r.delta_ssdc <= r.delta_ssdc_ci[1]
    for point in r.alpha_sweep:
        assert point.clean_acc_ci[0] <= point.clean_acc <= point.clean_acc_ci[1]
        for shift, why in (point.fragility_undefined or {}).items():
            assert math.isnan(point.fragility[shift]) and point.clean_acc_ci[0] <= 0.25 and "chance" in why
