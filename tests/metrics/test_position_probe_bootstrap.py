"""The probe's held-out R² on resampled groups: the probe fitted once on the fit images, each replicate's score equal
to that of an accumulator fed the fit images and the held-out images of the resampled groups, repeated (brute force);
the point estimate does not move with the groups or the batches."""

from __future__ import annotations

import pytest
import torch

from peanchor.metrics.bootstrap import bootstrap_counts
from peanchor.metrics.position_probe import PositionProbeAccumulator


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randn(40, 2, 9, 5, generator=g, dtype=torch.float64)  # (B, L, N, D)
    tokens[..., 0] += torch.arange(9.0, dtype=torch.float64) / 3  # layer-wide position signal
    return tokens, torch.rand(40, generator=g) < 0.5


def test_groups_leave_the_estimate_as_it_is(data):
    tokens, held = data
    plain = PositionProbeAccumulator((3, 3))
    plain.update(tokens, held)
    grouped = PositionProbeAccumulator((3, 3), groups=7)
    for start in range(0, 40, 6):
        grouped.update(tokens[start : start + 6], held[start : start + 6])
    torch.testing.assert_close(grouped.compute(), plain.compute(), rtol=0, atol=1e-12)


def test_each_replicate_is_the_score_on_the_resampled_heldout_images(data):
    tokens, held = data
    acc = PositionProbeAccumulator((3, 3), groups=7)
    acc.update(tokens, held)
    counts = bootstrap_counts(7, 12, seed=1)
    reps = acc.replicates(counts)  # (R, L, 2)
    fit = [i for i in range(40) if not held[i]]
    for r in range(12):
        by_hand = PositionProbeAccumulator((3, 3))
        by_hand.update(tokens[fit], torch.zeros(len(fit), dtype=torch.bool))
        taken = [i for i in range(40) if held[i] for _ in range(int(counts[r, i % 7]))]
        by_hand.update(tokens[taken], torch.ones(len(taken), dtype=torch.bool))
        torch.testing.assert_close(reps[r], by_hand.compute(), rtol=0, atol=1e-12)


def test_replicates_need_groups(data):
    tokens, held = data
    acc = PositionProbeAccumulator((3, 3))
    acc.update(tokens, held)
    with pytest.raises(ValueError, match="groups=G"):
        acc.replicates(bootstrap_counts(3, 2, 0))
