"""The intervals behind a verdict and the three-valued rule: a t-interval over seeds as scipy gives it, a single
seed's own interval, an FS undefined for some seeds left out and named, and how parts combine."""

from __future__ import annotations

import math

import pytest
from scipy import stats

from peanchor.report.evidence import (
    DOES_NOT_REPLICATE,
    INCONCLUSIVE,
    NOT_MEASURED,
    REPLICATES,
    Interval,
    all_of,
    any_of,
    at_least,
    at_most,
    difference,
    fs_estimate,
    over_seeds,
    within,
)
from peanchor.results.records import results_from_dict
from tests.helpers.claim_results import PAPER_LIKE, claim_results


def test_over_seeds_is_scipys_t_interval():
    values = [0.31, 0.27, 0.35, 0.30]
    iv = over_seeds(values)
    low, high = stats.t.interval(0.95, len(values) - 1, loc=sum(values) / 4, scale=stats.sem(values))
    assert (iv.low, iv.high, iv.n, iv.basis) == (pytest.approx(low), pytest.approx(high), 4, "seeds")
    assert not over_seeds([0.3]).bounded and math.isnan(over_seeds([]).value)


def test_the_three_verdicts_and_how_parts_combine():
    assert at_least(Interval(0.3, 0.25, 0.35), 0.25) == REPLICATES  # the threshold itself is on the claim's side
    assert at_least(Interval(0.3, 0.25, 0.35), 0.25, strict=True) == INCONCLUSIVE
    assert at_least(Interval(0.1, 0.05, 0.2), 0.25) == DOES_NOT_REPLICATE
    assert at_least(Interval(0.3), 0.0) == INCONCLUSIVE  # no interval
    assert at_most(Interval(-0.3, -0.4, -0.2), 0.0, strict=True) == REPLICATES
    assert within(Interval(0.0, -0.05, 0.05), -0.1, 0.1) == REPLICATES
    assert within(Interval(0.2, 0.15, 0.25), -0.1, 0.1) == DOES_NOT_REPLICATE
    assert within(Interval(0.1, 0.05, 0.15), -0.1, 0.1) == INCONCLUSIVE
    assert all_of([REPLICATES, INCONCLUSIVE]) == INCONCLUSIVE
    assert all_of([REPLICATES, DOES_NOT_REPLICATE, INCONCLUSIVE]) == DOES_NOT_REPLICATE
    assert all_of([NOT_MEASURED]) == NOT_MEASURED and all_of([REPLICATES, NOT_MEASURED]) == REPLICATES
    assert any_of([DOES_NOT_REPLICATE, INCONCLUSIVE]) == INCONCLUSIVE
    assert any_of([DOES_NOT_REPLICATE, REPLICATES]) == REPLICATES
    assert any_of([DOES_NOT_REPLICATE, DOES_NOT_REPLICATE]) == DOES_NOT_REPLICATE


def test_a_difference_of_two_intervals_takes_their_far_ends():
    d = difference(Interval(0.5, 0.45, 0.55), Interval(0.3, 0.28, 0.32))
    assert (d.value, d.low, d.high) == pytest.approx((0.2, 0.13, 0.27))
    assert difference(Interval(0.5, 0.4, 0.6), Interval(math.nan, undefined="at chance")).text() == "undefined (at chance)"


def test_an_fs_undefined_for_some_seeds_is_left_out_and_named():
    doc = claim_results({"rope": PAPER_LIKE["rope"]})
    doc["models"][1]["fragility"]["jpeg"] = None
    doc["models"][1]["fragility_undefined"] = {"jpeg": "at chance"}
    models = results_from_dict(doc).models
    fs = fs_estimate(models, "jpeg")
    assert fs.n == 2 and fs.note == "left out, FS undefined: rope-s1: at chance"
    assert fs.value == pytest.approx((models[0].fragility["jpeg"] + models[2].fragility["jpeg"]) / 2)
