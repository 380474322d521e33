"""RPI per image: every number under RPI (SSDC, every lens, top-1, their intervals) is the same at any batch size,
to float rounding; the paper's per-call mode still runs and records how many permutations it drew; a RoPE model's
layer 0 (no position by construction) is 0 under RPI within its interval."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.interventions.permutation import image_permutations, image_stream_seed

from tests.analysis.test_evaluate import INFO, quadrant_images
from tests.helpers.builders import plan


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    images, labels = quadrant_images(50, seed=4)
    return EvalSet.from_tensors(images, labels, INFO)


def _numbers(r) -> dict[str, list[float]]:
    """Every number of an analysis under RPI, flat, with the intervals."""
    out = {"rpi_acc": [r.rpi_acc, *r.rpi_acc_ci], "delta_ssdc": [r.delta_ssdc, *r.delta_ssdc_ci],
           "ssdc_rpi": [*r.ssdc.rpi, *sum(r.ssdc.rpi_ci, [])], "ssdc_normal": [*r.ssdc.normal, *sum(r.ssdc.normal_ci, [])],
           "probe_rpi": [*r.position_probe.row.rpi, *r.position_probe.col.rpi],
           "attention_rpi": sum(r.attention_distance.manhattan.rpi, []),
           "rank_rpi": list(r.lenses["effective_rank"].rpi)}  # fmt: skip
    for e in r.alpha_sweep:
        out[f"sweep {e.alpha}"] = [e.delta_ssdc, *e.delta_ssdc_ci, e.clean_acc]
    return out


@pytest.mark.parametrize("pe", ["ape", "rope"])
def test_every_rpi_number_is_the_same_at_any_batch_size(pe, evalset, micro):
    model = micro(pe, num_classes=4)
    results = [evaluate_model(model, evalset, plan(alphas=(1.0, 0.5), rpi_draws=2, batch_size=b), info=INFO,
                              device="cpu", progress=False) for b in (1, 25, 50)]  # fmt: skip
    first = _numbers(results[0])
    for r in results[1:]:
        for key, values in _numbers(r).items():
            torch.testing.assert_close(torch.tensor(values, dtype=torch.float64),
                                       torch.tensor(first[key], dtype=torch.float64), rtol=0, atol=2e-6,
                                       equal_nan=True, msg=key)  # fmt: skip
        assert r.ssdc.rpi_permutations == 2 * len(evalset)  # two draws, one permutation per image


def test_per_call_is_the_papers_and_depends_on_the_batch(evalset, micro):
    """One permutation per forward call, shared by the batch: what it records, and that the batch moves it."""
    model = micro("ape", num_classes=4)
    r10, r50 = (evaluate_model(model, evalset, plan(alphas=(), rpi_mode="per_call", batch_size=b), info=INFO,
                               device="cpu", progress=False) for b in (10, 50))  # fmt: skip
    assert r10.settings.rpi_mode == "per_call" and r10.settings.batch_size == 10
    assert r10.ssdc.rpi_permutations == 5 and r50.ssdc.rpi_permutations == 1
    assert r10.passes["probe_rpi"] == 1  # the probe's own pass with a permutation per image
    assert r10.ssdc.rpi != r50.ssdc.rpi


def test_rope_layer_zero_is_zero_under_rpi_within_its_interval(micro):
    """Layer 0 of a RoPE model is the patch embedding: no position by construction, so its SSDC under RPI is 0."""
    images, labels = quadrant_images(200, seed=5)
    evalset = EvalSet.from_tensors(images, labels, INFO)
    for b in (1 + 199 // 2, 200):
        r = evaluate_model(micro("rope", num_classes=4), evalset, plan(alphas=(), batch_size=b), info=INFO,
                           device="cpu", progress=False)  # fmt: skip
        low, high = r.ssdc.rpi_ci[0][0], r.ssdc.rpi_ci[1][0]
        assert low <= 0.0 <= high and abs(r.ssdc.rpi[0]) < 0.15, (r.ssdc.rpi, r.ssdc.rpi_ci)


def test_an_images_permutation_depends_on_its_index_only():
    a = image_permutations(9, list(range(10)), seed=3, draw=1)  # (10, 9)
    b = torch.cat([image_permutations(9, [i], seed=3, draw=1) for i in reversed(range(10))]).flip(0)
    assert torch.equal(a, b)
    assert all(sorted(row.tolist()) == list(range(9)) for row in a)
    assert not torch.equal(a, image_permutations(9, list(range(10)), seed=3, draw=2))  # another draw, another stream
    seeds = {image_stream_seed(s, d, i) for s in range(3) for d in range(3) for i in range(50)}
    assert len(seeds) == 3 * 3 * 50 and all(0 <= x < 2**64 for x in seeds)
    # uniform: each slot receives each position about equally often over many images
    many = image_permutations(4, list(range(4000)), seed=0, draw=0)  # (4000, 4)
    counts = torch.stack([(many == k).sum(dim=0) for k in range(4)])  # (4, 4)
    assert counts.min() > 1000 - 4 * math.sqrt(750) and counts.max() < 1000 + 4 * math.sqrt(750)
