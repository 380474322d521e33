"""One resampling scheme for a whole analysis: a bootstrap over fixed groups of images, shared by every estimate.

The evaluation images fall into ``G`` groups by their index in the evaluation set (``group = index % G``), so the
groups do not depend on how the images are batched or sharded. Every accumulator keeps per-group sums (SSDC: the
similarity matrices summed per group; accuracy: the correct answers per group; the probe: its held-out sums per
group), never per-image values, and an estimate is a function of those sums. A bootstrap replicate resamples the
``G`` groups with replacement: :func:`bootstrap_counts` draws one seeded ``(R, G)`` matrix of how often each group
is taken in each replicate, and every estimate's replicate ``r`` is the same function of the group sums weighted by
``counts[r]``. Because every quantity of the analysis is resampled with the same matrix, a difference, a ratio or a
slope of two estimates gets a *joint* interval (its replicates are the differences of the replicates), paired on
the same images. Intervals are percentile intervals of the replicates (:func:`percentile_interval`).

With one image per group (``G`` = the number of images) this is the ordinary nonparametric bootstrap over images;
with fewer groups it is a bootstrap over exchangeable blocks of images, which is as valid for images drawn
independently and costs ``G`` sums instead of one per image.

Imports: torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["CI_LEVEL", "DEFAULT_GROUPS", "DEFAULT_REPLICATES", "GroupBootstrap", "bootstrap_counts", "group_sizes",
           "image_groups", "num_groups", "percentile_interval", "ratio_replicates"]  # fmt: skip

CI_LEVEL = 0.95
DEFAULT_GROUPS = 50
DEFAULT_REPLICATES = 200
_COUNTS_STREAM = 0x62_6F_6F_74  # "boot": keeps the counts' stream apart from other streams seeded with the seed


def num_groups(num_images: int, most: int = DEFAULT_GROUPS) -> int:
    """``min(num_images, most)``: every group holds at least one image.

    >>> num_groups(30), num_groups(500)
    (30, 50)
    """
    if num_images < 1 or most < 1:
        raise ValueError(f"groups need at least one image and one group, got {num_images} images, {most} groups")
    return min(num_images, most)


def image_groups(indices: Tensor, groups: int) -> Tensor:
    """The group of each image: its index in the evaluation set modulo ``groups``.

    >>> image_groups(torch.arange(5), 2).tolist()
    [0, 1, 0, 1, 0]
    """
    return indices.remainder(groups)


def group_sizes(num_images: int, groups: int) -> Tensor:
    """How many images each group holds, ``(G,)`` float64.

    >>> group_sizes(5, 2).tolist()
    [3.0, 2.0]
    """
    return torch.bincount(image_groups(torch.arange(num_images), groups), minlength=groups).to(torch.float64)


def bootstrap_counts(groups: int, replicates: int, seed: int) -> Tensor:
    """``(R, G)`` float64: how often each group is drawn in each replicate (``G`` draws with replacement), from a CPU
    generator seeded with ``seed``; every row sums to ``G``.

    >>> c = bootstrap_counts(4, 3, seed=0)
    >>> c.shape, c.sum(dim=1).tolist()
    (torch.Size([3, 4]), [4.0, 4.0, 4.0])
    """
    generator = torch.Generator().manual_seed((seed ^ _COUNTS_STREAM) & ((1 << 63) - 1))
    draws = torch.randint(groups, (replicates, groups), generator=generator)  # (R, G): the groups taken
    counts = torch.zeros(replicates, groups, dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))  # (R, G)


def ratio_replicates(numerator: Tensor, denominator: Tensor, counts: Tensor) -> Tensor:
    """Replicates of ``Σ numerator / Σ denominator`` over resampled groups: ``(counts @ num) / (counts @ den)``.

    ``numerator`` and ``denominator`` are ``(G, ...)`` per-group sums; returns ``(R, ...)`` float64.

    >>> ratio_replicates(torch.tensor([1., 2.]), torch.tensor([2., 2.]), torch.tensor([[2., 0.], [1., 1.]])).tolist()
    [0.5, 0.75]
    """
    flat_num = numerator.to(torch.float64).reshape(numerator.shape[0], -1)  # (G, K)
    flat_den = denominator.to(torch.float64).reshape(denominator.shape[0], -1)  # (G, K) or (G, 1)
    counts = counts.to(torch.float64)
    out = (counts @ flat_num) / (counts @ flat_den)  # (R, K)
    return out.reshape(counts.shape[0], *numerator.shape[1:])


def percentile_interval(replicates: Tensor, level: float = CI_LEVEL) -> tuple[Tensor, Tensor]:
    """The percentile interval of ``replicates`` ``(R, ...)``: ``(low (...), high (...))`` float64, ignoring
    replicates that are NaN (an estimate undefined on that resample); NaN where every replicate is.

    >>> low, high = percentile_interval(torch.arange(101.0), 0.9)
    >>> round(low.item(), 9), round(high.item(), 9)  # the tail 0.05 is 0.04999... in floats
    (5.0, 95.0)
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    tail = (1.0 - level) / 2
    q = torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
    low, high = torch.nanquantile(replicates.to(torch.float64), q, dim=0)
    return low, high


@dataclass(frozen=True)
class GroupBootstrap:
    """The resampling of one analysis: ``groups`` groups of images, ``counts`` ``(R, G)`` shared by every estimate,
    intervals at ``level``."""

    groups: int
    counts: Tensor  # (R, G) float64
    level: float = CI_LEVEL

    @classmethod
    def of(cls, num_images: int, *, groups: int = DEFAULT_GROUPS, replicates: int = DEFAULT_REPLICATES,
           seed: int = 0, level: float = CI_LEVEL) -> GroupBootstrap:  # fmt: skip
        g = num_groups(num_images, groups)
        return cls(g, bootstrap_counts(g, replicates, seed), level)

    @property
    def replicates(self) -> int:
        return int(self.counts.shape[0])

    def interval(self, replicates: Tensor) -> list[float]:
        """``[low, high]`` of one estimate's replicates ``(R,)``."""
        low, high = percentile_interval(replicates.reshape(-1), self.level)
        return [float(low), float(high)]

    def layer_intervals(self, replicates: Tensor) -> list[list[float]]:
        """``[[low per layer], [high per layer]]`` of per-layer replicates ``(R, L)``."""
        low, high = percentile_interval(replicates, self.level)
        return [[float(v) for v in low], [float(v) for v in high]]
