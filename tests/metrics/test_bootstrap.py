"""The groups bootstrap: its counts, its percentile intervals against numpy, and every replicate against a brute-force
loop that builds the resampled set of images group by group (accuracy-like ratios, SSDC with scipy's Spearman), with
the joint interval of a difference taken replicate by replicate."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy.stats import spearmanr

from peanchor.metrics import SSDCAccumulator, grid_distances
from peanchor.metrics.bootstrap import (
    GroupBootstrap,
    bootstrap_counts,
    group_sizes,
    image_groups,
    num_groups,
    percentile_interval,
    ratio_replicates,
)


def _resampled_groups(counts_row: torch.Tensor) -> list[int]:
    """The groups one replicate takes, each as often as its count (the brute-force side)."""
    return [g for g, c in enumerate(counts_row.tolist()) for _ in range(int(c))]


def test_counts_draw_every_group_with_replacement():
    counts = bootstrap_counts(7, 4000, seed=3)  # (R, G)
    assert counts.shape == (4000, 7) and bool((counts.sum(dim=1) == 7).all())
    assert torch.equal(counts, bootstrap_counts(7, 4000, seed=3)) and not torch.equal(counts, bootstrap_counts(7, 4000, 4))
    # multinomial(G, 1/G): each count has mean 1 and variance 1 - 1/G
    assert counts.mean().item() == pytest.approx(1.0, abs=0.02)
    assert counts.var(dim=0).mean().item() == pytest.approx(1 - 1 / 7, abs=0.05)
    assert num_groups(10, 50) == 10 and num_groups(500, 50) == 50
    assert image_groups(torch.arange(7), 3).tolist() == [0, 1, 2, 0, 1, 2, 0] and group_sizes(7, 3).tolist() == [3, 2, 2]


def test_percentile_interval_is_numpys():
    reps = torch.randn(301, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    reps[5, 1] = float("nan")  # an undefined replicate is left out
    low, high = percentile_interval(reps, 0.9)
    for k in range(3):
        column = reps[:, k].numpy()
        column = column[~np.isnan(column)]
        assert low[k].item() == pytest.approx(np.percentile(column, 5.0), abs=1e-12)
        assert high[k].item() == pytest.approx(np.percentile(column, 95.0), abs=1e-12)


def test_ratio_replicates_are_the_resampled_ratio():
    g = torch.Generator().manual_seed(1)
    correct = torch.randint(0, 5, (6,), generator=g).to(torch.float64)  # per group
    sizes = torch.full((6,), 5.0, dtype=torch.float64)
    counts = bootstrap_counts(6, 50, seed=2)
    reps = ratio_replicates(correct, sizes, counts)  # (R,)
    for r in range(50):
        taken = _resampled_groups(counts[r])
        assert reps[r].item() == pytest.approx(sum(correct[t].item() for t in taken) / (5.0 * len(taken)), abs=1e-15)


def _scipy_ssdc(similarity: torch.Tensor, grid: tuple[int, int]) -> float:
    i, j = torch.triu_indices(grid[0] * grid[1], grid[0] * grid[1], offset=1)
    return float(spearmanr(similarity[i, j].numpy(), -grid_distances(grid)[i, j].numpy()).statistic)


def test_ssdc_replicates_and_the_joint_interval_of_a_difference_against_a_brute_force_loop():
    grid, groups = (3, 3), 5
    tokens = torch.randn(23, 2, 9, 6, generator=torch.Generator().manual_seed(4), dtype=torch.float64)  # (B, L, N, D)
    tokens[:, 1] += torch.linspace(0, 2, 9)[:, None]  # some spatial structure in layer 1
    acc = SSDCAccumulator(grid, groups=groups)
    for start in (0, 9, 10, 17):  # uneven batches
        acc.update(tokens[start : {0: 9, 9: 10, 10: 17, 17: 23}[start]])
    boot = GroupBootstrap(groups, bootstrap_counts(groups, 40, seed=5))
    reps = acc.replicates(boot.counts)  # (R, L)
    unit = F.normalize(tokens, dim=-1)
    sims = unit @ unit.transpose(-1, -2)  # (B, L, N, N)
    group_of = torch.arange(23) % groups
    brute = torch.empty(40, 2, dtype=torch.float64)
    for r in range(40):
        images = [i for g in _resampled_groups(boot.counts[r]) for i in range(23) if group_of[i] == g]
        for layer in range(2):
            brute[r, layer] = _scipy_ssdc(sims[images, layer].mean(dim=0), grid)
    torch.testing.assert_close(reps, brute, rtol=0, atol=1e-12)
    # the difference's interval is taken on the differences of paired replicates, not from two separate intervals
    joint = boot.interval(reps[:, 1] - reps[:, 0])
    by_hand = np.percentile((brute[:, 1] - brute[:, 0]).numpy(), [2.5, 97.5])
    assert joint == pytest.approx(by_hand.tolist(), abs=1e-12)
    # the point estimate does not move with the groups
    assert acc.compute().tolist() == pytest.approx(_plain(tokens, grid), abs=1e-12)


def _plain(tokens: torch.Tensor, grid: tuple[int, int]) -> list[float]:
    acc = SSDCAccumulator(grid)
    acc.update(tokens)
    return acc.compute().tolist()


def test_per_image_mode_replicates_are_the_resampled_mean_of_defined_values():
    grid = (2, 3)
    tokens = torch.randn(11, 1, 6, 4, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    tokens[3] = 1.0  # every token of image 3 alike: its SSDC is undefined and left out
    acc = SSDCAccumulator(grid, mode="per_image", groups=4)
    acc.update(tokens[:5])
    acc.update(tokens[5:])
    counts = bootstrap_counts(4, 30, seed=0)
    values = [float("nan") if i == 3 else _scipy_ssdc((F.normalize(tokens[i, 0], dim=-1) @ F.normalize(
        tokens[i, 0], dim=-1).T), grid) for i in range(11)]  # fmt: skip
    reps = acc.replicates(counts)[:, 0]
    for r in range(30):
        taken = [values[i] for g in _resampled_groups(counts[r]) for i in range(11) if i % 4 == g]
        defined = [v for v in taken if not np.isnan(v)]
        assert reps[r].item() == pytest.approx(sum(defined) / len(defined), abs=1e-12)


def test_groups_are_refused_with_the_older_bootstrap_and_replicates_need_groups():
    with pytest.raises(ValueError, match="two resampling schemes"):
        SSDCAccumulator((2, 2), bootstrap=5, groups=3)
    acc = SSDCAccumulator((2, 2))
    acc.update(torch.randn(2, 1, 4, 3))
    with pytest.raises(ValueError, match="needs SSDCAccumulator"):
        acc.replicates(bootstrap_counts(3, 2, 0))


def test_shards_merged_with_their_indices_give_the_same_replicates():
    tokens = torch.randn(20, 2, 4, 5, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    whole = SSDCAccumulator((2, 2), groups=6)
    whole.update(tokens)
    first, second = SSDCAccumulator((2, 2), groups=6), SSDCAccumulator((2, 2), groups=6)
    odd, even = torch.arange(1, 20, 2), torch.arange(0, 20, 2)  # another split of the images than whole's
    first.update(tokens[odd], odd)
    second.update(tokens[even], even)
    first.merge(second)
    counts = bootstrap_counts(6, 25, seed=9)
    torch.testing.assert_close(first.replicates(counts), whole.replicates(counts), rtol=0, atol=1e-12)
    torch.testing.assert_close(first.compute(), whole.compute(), rtol=0, atol=1e-12)
