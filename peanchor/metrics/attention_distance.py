"""Mean attention distance per head (Dosovitskiy et al. 2021, Fig. 7; Raghu et al. 2021), and a streaming
accumulator for it over layers and images.

For one head and one query patch ``i``, the attention distance is the attention-weighted grid distance to the
patch keys, ``sum_j A_ij D_ij / sum_j A_ij`` with ``j`` over the patches only. Prefix tokens (CLS, registers) have
no grid position, so they are excluded as queries, and as keys their weight is left out and the patch weights
are renormalised to sum to one: the distance is that of the head's attention *among the patches*. How much
weight went to the prefix tokens is kept separately (:func:`prefix_mass`), so that a head which attends almost
only to CLS is visible as such. The mean over query patches (and images) gives one number per head.

``D`` is the grid distance between patch positions in units of patches (:mod:`peanchor.metrics.grid`),
Manhattan or Euclidean, with the slots laid out row-major. Under RPI the slots, not where the content came from,
are the positions, exactly as for SSDC. A head that spreads its attention evenly over the patches has the
distance of :func:`uniform_attention_distance`.

Imports: torch; :mod:`peanchor.metrics.grid`.
"""

from __future__ import annotations

import functools
from typing import get_args

import torch
from torch import Tensor

from peanchor.metrics.grid import Metric, check_grid, check_metric, grid_distances

__all__ = ["METRICS", "AttentionDistanceAccumulator", "attention_distance", "prefix_mass", "uniform_attention_distance"]

METRICS: tuple[str, ...] = get_args(Metric)


@functools.lru_cache(maxsize=32)
def _row_weights(grid: tuple[int, int], device: torch.device, dtype: torch.dtype) -> Tensor:
    """``(N, N, M + 1)``: for query ``i`` and key ``j``, the distance ``D_ij`` of every metric in :data:`METRICS`,
    then 1 (so that one matmul gives the weighted distances and the patch mass). Cached per device and dtype."""
    d = [grid_distances(grid, m) for m in METRICS]
    return torch.stack([*d, torch.ones_like(d[0])], dim=-1).to(device=device, dtype=dtype)


def _check_weights(weights: Tensor, n: int, num_prefix: int) -> None:
    if not isinstance(weights, Tensor) or weights.dim() < 3 or weights.shape[-1] != weights.shape[-2]:
        shape = tuple(weights.shape) if isinstance(weights, Tensor) else type(weights).__name__
        raise ValueError(f"attention weights must have shape (..., T, T), got {shape}")
    if num_prefix < 0 or weights.shape[-1] != num_prefix + n:
        raise ValueError(
            f"attention weights have T={weights.shape[-1]} tokens but the grid has {n} patches and "
            f"num_prefix={num_prefix}; expected T = num_prefix + H*W"
        )


def _per_query(weights: Tensor, grid: tuple[int, int], num_prefix: int) -> tuple[Tensor, Tensor]:
    """Per query patch: the distances ``(M, ..., N)`` (one per metric) and the prefix weight ``(..., N)``."""
    dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    lead, t = weights.shape[:-2], weights.shape[-1]
    w = weights.to(dtype).reshape(-1, t, t)  # (R, T, T)
    n = t - num_prefix
    # Query-major view of the patch block (no copy): one batched matmul over the queries gives, per query,
    # sum_j A_ij D_ij for every metric and the patch mass sum_j A_ij.
    rows = w[:, num_prefix:, num_prefix:].transpose(0, 1)  # (N, R, N)
    sums = torch.matmul(rows, _row_weights(grid, w.device, dtype))  # (N, R, M + 1)
    distance = (sums[..., :-1] / sums[..., -1:]).permute(2, 1, 0)  # (M, R, N), renormalised over the patch keys
    prefix = w[:, num_prefix:, :num_prefix].sum(dim=-1)  # (R, N)
    return distance.reshape(-1, *lead, n), prefix.reshape(*lead, n)


def attention_distance(
    weights: Tensor, grid: tuple[int, int], num_prefix: int = 1, metric: Metric = "manhattan"
) -> Tensor:
    """Mean attention distance of every head, in patches: ``(..., H, T, T) -> (..., H)``.

    ``weights`` are attention probabilities (softmax over keys, rows summing to 1) with the ``num_prefix``
    prefix tokens first and the ``H*W`` patches after them, row-major. Prefix tokens are excluded as queries
    and as keys (the patch weights of each query are renormalised to sum to 1); the result is the mean over
    query patches of ``sum_j A_ij D_ij / sum_j A_ij``.

    Returns:
        ``(..., H)``: one mean distance per head, in patches: float64 for float64 ``weights``, else float32.

    Examples:
        >>> eye = torch.eye(5).expand(1, 5, 5)  # every token attends to itself only
        >>> attention_distance(eye, (2, 2)).item()
        0.0
        >>> neighbour = torch.tensor([[[1., 0, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1], [0, 1, 0, 0]]])  # (1, 4, 4)
        >>> attention_distance(neighbour, (1, 3), num_prefix=1).item()  # slots 0→1, 1→2, 2→0
        1.3333333730697632
    """
    h, w = check_grid(grid)
    index = METRICS.index(check_metric(metric))
    _check_weights(weights, h * w, num_prefix)
    distance, _ = _per_query(weights, (h, w), num_prefix)  # (M, ..., N)
    return distance[index].mean(dim=-1)


def prefix_mass(weights: Tensor, num_prefix: int = 1) -> Tensor:
    """Mean attention weight the patch queries give the prefix tokens: ``(..., H, T, T) -> (..., H)``.

    >>> w = torch.full((1, 3, 3), 1 / 3)  # uniform attention over CLS and two patches
    >>> prefix_mass(w).tolist()
    [0.3333333432674408]
    """
    if not isinstance(weights, Tensor) or weights.dim() < 3 or not 0 <= num_prefix < weights.shape[-1]:
        raise ValueError(f"prefix_mass needs weights (..., T, T) and 0 <= num_prefix < T, got num_prefix={num_prefix}")
    dtype = torch.float64 if weights.dtype == torch.float64 else torch.float32
    return weights.to(dtype)[..., num_prefix:, :num_prefix].sum(dim=-1).mean(dim=-1)


def uniform_attention_distance(grid: tuple[int, int], metric: Metric = "manhattan") -> float:
    """The attention distance of a head that attends to every patch equally (itself included): the mean grid
    distance over all ordered pairs of patches, the level a position-blind head sits at.

    >>> uniform_attention_distance((2, 2))
    1.0
    """
    return float(grid_distances(check_grid(grid), metric).mean())


class AttentionDistanceAccumulator:
    """Mean attention distance and prefix mass per layer and head over any number of images, in O(L·H) memory.

    Feed it every block's attention weights as the model computes them, ``update(layer, weights (B, H, T, T))``
    (it is an :data:`~peanchor.models.interface.AttentionSink`), then :meth:`compute`. Every (image, query patch)
    counts once. Sums stay on the device of the weights (no sync per batch); they are float64.

    Examples:
        >>> acc = AttentionDistanceAccumulator((2, 2))
        >>> acc.update(0, torch.softmax(torch.randn(3, 2, 5, 5), dim=-1))  # (B, H, T, T)
        >>> out = acc.compute()
        >>> sorted(out), tuple(out["manhattan"].shape)
        (['euclidean', 'manhattan', 'prefix_mass'], (1, 2))
    """

    def __init__(self, grid: tuple[int, int], num_prefix: int = 1) -> None:
        self.grid = check_grid(grid)
        if isinstance(num_prefix, bool) or not isinstance(num_prefix, int) or num_prefix < 0:
            raise ValueError(f"num_prefix must be a non-negative int, got {num_prefix!r}")
        self.num_prefix = num_prefix
        self.reset()

    def reset(self) -> None:
        """Forget every image."""
        self._sums: dict[int, Tensor] = {}  # layer → (M + 1, H) float64: the distances, then the prefix mass
        self._counts: dict[int, int] = {}  # layer → (image, query) pairs seen

    def merge(self, other: AttentionDistanceAccumulator) -> None:
        """Add the images ``other`` has seen (a shard of the same evaluation set): afterwards :meth:`compute` is
        that of both shards together."""
        if (other.grid, other.num_prefix) != (self.grid, self.num_prefix):
            raise ValueError("merge needs accumulators of the same grid and num_prefix")
        for layer, sums in other._sums.items():
            if layer in self._sums:
                if self._sums[layer].shape != sums.shape:
                    raise ValueError(f"layer {layer} had {self._sums[layer].shape[1]} heads, the other {sums.shape[1]}")
                self._sums[layer] += sums.to(self._sums[layer].device)
            else:
                self._sums[layer] = sums.clone()
            self._counts[layer] = self._counts.get(layer, 0) + other._counts[layer]

    def __call__(self, layer: int, weights: Tensor) -> None:
        self.update(layer, weights)

    def update(self, layer: int, weights: Tensor) -> None:
        """Add the attention weights ``(B, H, T, T)`` of block ``layer`` for a batch of images."""
        h, w = self.grid
        _check_weights(weights, h * w, self.num_prefix)
        if weights.dim() != 4:
            raise ValueError(f"attention weights must have shape (B, H, T, T), got {tuple(weights.shape)}")
        distance, prefix = _per_query(weights, self.grid, self.num_prefix)  # (M, B, H, N), (B, H, N)
        sums = torch.cat([distance.sum(dim=(1, 3)), prefix.sum(dim=(0, 2))[None]]).to(torch.float64)  # (M + 1, H)
        if layer in self._sums:
            if self._sums[layer].shape != sums.shape:
                raise ValueError(f"layer {layer} had {self._sums[layer].shape[1]} heads, now {sums.shape[1]}")
            self._sums[layer] += sums
        else:
            self._sums[layer] = sums
        self._counts[layer] = self._counts.get(layer, 0) + weights.shape[0] * h * w

    @property
    def layers(self) -> list[int]:
        return sorted(self._sums)

    def compute(self) -> dict[str, Tensor]:
        """``{"manhattan", "euclidean", "prefix_mass"}`` → float64 CPU ``(L, H)``, layers in order.

        Every layer from 0 to the highest seen must have been fed at least once.
        """
        if not self._sums:
            raise ValueError("AttentionDistanceAccumulator.compute() needs at least one update() first")
        layers = self.layers
        if layers != list(range(len(layers))):
            raise ValueError(f"attention weights were fed for layers {layers}; expected 0..{len(layers) - 1}")
        means = torch.stack([self._sums[i].cpu() / self._counts[i] for i in layers], dim=1)  # (M + 1, L, H)
        return {**{m: means[k] for k, m in enumerate(METRICS)}, "prefix_mass": means[len(METRICS)]}
