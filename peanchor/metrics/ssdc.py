"""SSDC — Spatial Similarity Distance Correlation — and a streaming accumulator for it.

SSDC of a token-similarity matrix ``S`` (N x N, tokens laid out row-major on an H x W grid) is the
Spearman correlation, over the pairs ``i < j``, between ``S_ij`` and ``-D_ij``, where ``D`` is the
Manhattan (or Euclidean) distance between the grid positions of tokens ``i`` and ``j``. Higher
means spatially close tokens are more similar. The paper's estimator averages the per-image
cosine-similarity matrices over all evaluated images and takes the SSDC of that mean
(:class:`SSDCAccumulator`, ``mode="mean_similarity"``).

The grid distances ``D`` are :mod:`peanchor.metrics.grid`; how the pairs of many matrices are ranked fast is the
private :mod:`peanchor.metrics._ssdc_fast`.

Imports: torch; :mod:`peanchor.metrics` (grid, _ssdc_fast).
"""

from __future__ import annotations

from typing import Literal, get_args

import torch
import torch.nn.functional as F
from torch import Tensor

from peanchor.metrics import _ssdc_fast
from peanchor.metrics.grid import Metric, grid_distances
from peanchor.metrics.grid import check_grid as _check_grid
from peanchor.metrics.grid import check_metric as _check_metric

__all__ = ["Metric", "Mode", "SSDCAccumulator", "grid_distances", "ssdc"]

Mode = Literal["mean_similarity", "per_image"]


def _check_similarity(similarity: Tensor, n: int, what: str = "similarity") -> None:
    if similarity.is_complex():
        raise ValueError(f"{what} must be real, got dtype {similarity.dtype}")
    if similarity.dim() < 2 or similarity.shape[-1] != similarity.shape[-2]:
        raise ValueError(f"{what} must have shape (..., N, N), got {tuple(similarity.shape)}")
    if similarity.shape[-1] != n:
        raise ValueError(
            f"{what} has N={similarity.shape[-1]} tokens but the grid has H*W={n}; "
            "drop the CLS token and check the grid"
        )


def ssdc(similarity: Tensor, grid: tuple[int, int], metric: Metric = "manhattan") -> Tensor:
    """Spatial Similarity Distance Correlation of one or more token-similarity matrices.

    Spearman correlation (tie-averaged ranks, as ``scipy.stats.spearmanr``) between ``S_ij`` and
    ``-D_ij`` over the pairs ``i < j``, with ``D`` from :func:`grid_distances`. Only the upper
    triangle of ``S`` is read, so ``S`` need not be symmetric. A constant ``S``, or one with a NaN
    among those pairs, gives NaN (as ``spearmanr``). Equal similarities share their mean rank;
    ``-0.0`` equals ``+0.0``. CPU tensors are ranked with numpy, others with torch.

    Args:
        similarity: ``(..., N, N)`` with ``N = H * W``, tokens in row-major grid order.
        grid: ``(H, W)``.
        metric: ``"manhattan"`` (paper default) or ``"euclidean"``.

    Returns:
        float64 tensor ``(...)`` on the device of ``similarity``.

    Examples:
        >>> d = grid_distances((3, 3))
        >>> round(ssdc(-d, (3, 3)).item(), 12)
        1.0
        >>> ssdc(torch.stack([-d, d]), (3, 3)).round(decimals=6)  # one value per leading index
        tensor([ 1., -1.], dtype=torch.float64)
        >>> ssdc(torch.stack([torch.ones(9, 9), torch.full((9, 9), float("nan"))]), (3, 3))
        tensor([nan, nan], dtype=torch.float64)
    """
    h, w = _check_grid(grid)
    _check_metric(metric)
    _check_similarity(similarity, h * w)
    # The definition, one value per matrix (tests/metrics/test_ssdc.py writes exactly this out with scipy and compares):
    #     i, j = torch.triu_indices(N, N, offset=1)                          # the pairs i < j, row-major
    #     spearman(similarity[..., i, j], -grid_distances(grid, metric)[i, j])
    # The fast path ranks the pairs of many matrices at once, against the -D ranks cached per grid.
    return _ssdc_fast.ssdc_of_matrices(similarity, (h, w), metric).reshape(similarity.shape[:-2])  # (...) float64


class SSDCAccumulator:
    """Streaming SSDC per layer over any number of images, in O(L·N²) memory.

    Feed it the LN1 tokens of every block with CLS dropped, batch by batch, then call
    :meth:`compute`.

    Modes:
        ``"mean_similarity"`` (paper): keep a running float64 sum of the per-image cosine-similarity
        matrices ``(L, N, N)``; SSDC is taken of their mean.
        ``"per_image"``: SSDC of each image's own similarity matrix, averaged over images. An image
        whose similarity matrix is constant (e.g. all tokens identical) or has a NaN has no SSDC; it
        is left out of that layer's mean.

    Groups (``groups=G > 0``): the images fall into ``G`` groups by their index in the evaluation set (``index %
    G``, :mod:`peanchor.metrics.bootstrap`) and the sums are kept per group (``(L, G, N, N)`` in mean_similarity
    mode, ``(G, L)`` in per_image mode), so that :meth:`replicates` gives the estimate on any resampling of the
    groups, the analysis's one bootstrap scheme. Pass each batch's image indices to :meth:`update` (default: the
    images in the order they come). :meth:`compute` is the same as without groups, up to float rounding.

    Bootstrap (``bootstrap=R > 0``, the older scheme, kept for callers of the accumulator): in mean_similarity mode every image gets ``R`` independent
    Poisson(1) weights (streaming Poisson bootstrap) and ``R`` weighted similarity sums
    ``(R, L, N, N)`` are kept in float32 (about 1.8 MB per replicate for L=12, N=196), so no image
    is stored. The weights come from a CPU ``torch.Generator`` seeded with ``seed`` and are drawn
    image by image, so the result does not depend on how the images were split into batches. In per_image mode the per-image values are kept
    (``num_images x L`` floats) and resampled with replacement in :meth:`confidence_interval`.

    State lives on the device of the first batch; :meth:`compute` returns float64 on the CPU. Tokens
    may be bf16/fp16/fp32 (similarities are computed in float32) or float64 (kept in float64).
    Note that the float32 similarity matmul follows torch's global TF32 settings on CUDA.

    Examples:
        >>> acc = SSDCAccumulator((2, 2))
        >>> acc.update(torch.randn(3, 2, 4, 8))  # (B, L, N, D)
        >>> acc.num_images, acc.compute().shape
        (3, torch.Size([2]))
    """

    def __init__(
        self,
        grid: tuple[int, int],
        metric: Metric = "manhattan",
        mode: Mode = "mean_similarity",
        bootstrap: int = 0,
        seed: int = 0,
        groups: int = 0,
    ) -> None:
        self.grid = _check_grid(grid)
        self.metric = _check_metric(metric)
        if mode not in get_args(Mode):
            raise ValueError(f"mode must be one of {get_args(Mode)}, got {mode!r}")
        self.mode = mode
        if isinstance(bootstrap, bool) or not isinstance(bootstrap, int) or bootstrap < 0:
            raise ValueError(f"bootstrap must be a non-negative int (number of replicates), got {bootstrap!r}")
        self.bootstrap = bootstrap
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.seed = seed
        if isinstance(groups, bool) or not isinstance(groups, int) or groups < 0:
            raise ValueError(f"groups must be a non-negative int, got {groups!r}")
        if groups and bootstrap:
            raise ValueError("groups and bootstrap are two resampling schemes: give one of them")
        self.groups = groups
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every image (and restart the bootstrap random stream from ``seed``)."""
        self._device: torch.device | None = None
        self._num_layers: int | None = None
        self._num_images = 0
        # mean_similarity
        self._sim_sum: Tensor | None = None  # (L, N, N) float64; (L, G, N, N) with groups
        self._boot_sum: Tensor | None = None  # (R, L, N, N) float32
        self._boot_weight: Tensor | None = None  # (R,) float64
        # per_image
        self._value_sum: Tensor | None = None  # (L,) float64, sum of the defined per-image SSDCs
        self._value_count: Tensor | None = None  # (L,) int64, how many were defined; (G, L) each with groups
        self._values: Tensor | None = None  # (capacity, L) float64, only with bootstrap
        self._generator = torch.Generator().manual_seed(self.seed)

    @property
    def num_images(self) -> int:
        """Images seen since construction or the last :meth:`reset`."""
        return self._num_images

    def _init_state(self, device: torch.device, num_layers: int) -> None:
        n = self.grid[0] * self.grid[1]
        self._device, self._num_layers = device, num_layers
        f64 = torch.float64
        if self.mode == "mean_similarity":
            per_group = (self.groups,) if self.groups else ()
            self._sim_sum = torch.zeros(num_layers, *per_group, n, n, dtype=f64, device=device)
            if self.bootstrap:
                self._boot_sum = torch.zeros(self.bootstrap, num_layers, n, n, dtype=torch.float32, device=device)
                self._boot_weight = torch.zeros(self.bootstrap, dtype=f64, device=device)
        else:
            per_group = (self.groups,) if self.groups else ()
            self._value_sum = torch.zeros(*per_group, num_layers, dtype=f64, device=device)
            self._value_count = torch.zeros(*per_group, num_layers, dtype=torch.int64, device=device)
            if self.bootstrap:
                self._values = torch.empty(64, num_layers, dtype=f64, device=device)

    # ----------------------------------------------------------------- update
    def update(self, tokens: Tensor, index: Tensor | None = None) -> None:
        """Add a batch of images.

        Args:
            tokens: ``(B, L, N, D)`` spatial tokens (CLS dropped), ``N = H * W`` in row-major order.
            index: ``(B,)`` the images' indices in the evaluation set, which place them in their groups (read only
                with ``groups``; default: the next ``B`` indices after the images seen so far).
        """
        h, w = self.grid
        if not isinstance(tokens, Tensor) or tokens.dim() != 4:
            shape = tuple(tokens.shape) if isinstance(tokens, Tensor) else type(tokens).__name__
            raise ValueError(f"tokens must have shape (B, L, N, D), got {shape}")
        if not tokens.is_floating_point():
            raise ValueError(f"tokens must be floating point, got dtype {tokens.dtype}")
        b, num_layers, n, d = tokens.shape
        if n != h * w:
            raise ValueError(
                f"tokens have N={n} but the grid {h}x{w} has {h * w} positions; drop the CLS token and check the grid"
            )
        if num_layers == 0 or d == 0:
            raise ValueError(f"tokens must have L >= 1 layers and D >= 1 channels, got {tuple(tokens.shape)}")
        if self._device is None:
            self._init_state(tokens.device, num_layers)
        elif tokens.device != self._device:
            raise ValueError(f"tokens are on {tokens.device} but this accumulator's state is on {self._device}")
        elif num_layers != self._num_layers:
            raise ValueError(f"tokens have L={num_layers} layers but earlier batches had {self._num_layers}")
        if b == 0:
            return

        dtype = torch.float64 if tokens.dtype == torch.float64 else torch.float32
        group = self._groups_of(index, b, tokens.device)  # (B,) or None
        if self.mode == "mean_similarity" and group is not None:
            for layer in range(num_layers):  # as below, each image's matrix added into its group's sum
                x = F.normalize(tokens[:, layer].to(dtype), dim=-1, eps=_ssdc_fast.NORMALISE_EPS)  # (B, N, D) unit tokens
                sims = torch.matmul(x, x.transpose(-1, -2)).to(torch.float64)  # (B, N, N)
                self._sim_sum[layer].index_add_(0, group, sims)  # (G, N, N)
        elif self.mode == "mean_similarity" and self.bootstrap:
            self._update_mean_bootstrap(F.normalize(tokens.to(dtype), dim=-1, eps=_ssdc_fast.NORMALISE_EPS))  # unit tokens
        elif self.mode == "mean_similarity":
            # Layer by layer, so that the unit tokens of a layer stay in cache: one batched matmul gives every
            # image's similarity matrix, summed over the batch in float64.
            for layer in range(num_layers):
                x = F.normalize(tokens[:, layer].to(dtype), dim=-1, eps=_ssdc_fast.NORMALISE_EPS)  # (B, N, D) unit tokens
                self._sim_sum[layer] += torch.matmul(x, x.transpose(-1, -2)).sum(dim=0, dtype=torch.float64)
        else:
            self._update_per_image(tokens, dtype, group)
        self._num_images += b

    def _groups_of(self, index: Tensor | None, b: int, device: torch.device) -> Tensor | None:
        """The group of each image of a batch, ``(B,)`` int64 on ``device``; None without groups."""
        if not self.groups:
            return None
        if index is None:
            index = torch.arange(self._num_images, self._num_images + b)
        index = torch.as_tensor(index, dtype=torch.int64)
        if index.shape != (b,):
            raise ValueError(f"index must have shape ({b},), got {tuple(index.shape)}")
        return index.remainder(self.groups).to(device)

    def _update_mean_bootstrap(self, x: Tensor) -> None:
        b, num_layers, n, _ = x.shape
        assert self._sim_sum is not None and self._boot_sum is not None and self._boot_weight is not None
        # (B, R): drawn image-major, so the stream is the same whatever the batch split.
        weights = torch.poisson(torch.ones(b, self.bootstrap), generator=self._generator)
        weights = weights.to(device=x.device, dtype=x.dtype)  # (B, R)
        chunk = _ssdc_fast.image_chunk(x)
        for start in range(0, b, chunk):
            xs = x[start : start + chunk]  # (b', L, N, D)
            sims = torch.matmul(xs, xs.transpose(-1, -2))  # (b', L, N, N)
            self._sim_sum += sims.sum(dim=0, dtype=torch.float64)
            flat = sims.reshape(sims.shape[0], -1)  # (b', L*N*N)
            weighted = weights[start : start + chunk].T @ flat  # (R, L*N*N)
            self._boot_sum += weighted.view(self.bootstrap, num_layers, n, n).to(torch.float32)
        self._boot_weight += weights.sum(dim=0, dtype=torch.float64)

    def _update_per_image(self, tokens: Tensor, dtype: torch.dtype, group: Tensor | None = None) -> None:
        assert self._value_sum is not None and self._value_count is not None
        values = []
        chunk = _ssdc_fast.image_chunk(tokens)
        for start in range(0, tokens.shape[0], chunk):
            xs = tokens[start : start + chunk].to(dtype)  # (b', L, N, D)
            pairs = _ssdc_fast.cosine_pair_blocks(xs)  # [(b' * L, P_i)]
            values.append(_ssdc_fast.ssdc_of_pairs(pairs, self.grid, self.metric).view(xs.shape[:2]))  # (b', L)
        batch_values = torch.cat(values)  # (B, L) float64
        defined = torch.isfinite(batch_values)  # (B, L)
        if group is not None:
            self._value_sum.index_add_(0, group, torch.where(defined, batch_values, 0.0))  # (G, L)
            self._value_count.index_add_(0, group, defined.to(torch.int64))
        else:
            self._value_sum += torch.where(defined, batch_values, 0.0).sum(dim=0)
            self._value_count += defined.sum(dim=0)
        if self.bootstrap:
            self._store_values(batch_values)

    def _store_values(self, batch_values: Tensor) -> None:
        assert self._values is not None
        start, end = self._num_images, self._num_images + batch_values.shape[0]
        if end > self._values.shape[0]:
            capacity = max(end, 2 * self._values.shape[0])  # doubling: amortised O(1) per image
            grown = self._values.new_empty(capacity, self._values.shape[1])
            grown[:start] = self._values[:start]
            self._values = grown
        self._values[start:end] = batch_values

    def merge(self, other: SSDCAccumulator) -> None:
        """Add the images ``other`` has seen (a shard of the same evaluation set, e.g. another GPU's): afterwards
        :meth:`compute` is that of both shards' images together. Both must have the same grid, metric, mode and
        bootstrap size; give shards different seeds when bootstrapping, or their replicates share weights."""
        same = ("grid", "metric", "mode", "bootstrap", "groups")
        if any(getattr(self, k) != getattr(other, k) for k in same):
            raise ValueError("merge needs accumulators of the same " + ", ".join(same))
        if other._num_images == 0:
            return
        if self._device is None:
            self._init_state(other._device, other._num_layers)  # type: ignore[arg-type]
        elif other._num_layers != self._num_layers:
            raise ValueError(f"the other accumulator has L={other._num_layers} layers, this one {self._num_layers}")
        for name in ("_sim_sum", "_boot_sum", "_boot_weight", "_value_sum", "_value_count"):
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine is not None:
                mine += theirs.to(mine.device)
        if self._values is not None:
            self._store_values(other._values[: other._num_images].to(self._values.device))  # type: ignore[index]
        self._num_images += other._num_images

    # ---------------------------------------------------------------- results
    def _require_images(self, what: str) -> None:
        if self._num_images == 0:
            raise ValueError(f"SSDCAccumulator.{what}() needs at least one image; call update() first")

    def compute(self) -> Tensor:
        """SSDC per layer, float64 CPU tensor ``(L,)`` (NaN where undefined)."""
        self._require_images("compute")
        if self.mode == "mean_similarity":
            assert self._sim_sum is not None
            total = self._sim_sum.sum(dim=1) if self.groups else self._sim_sum  # (L, N, N)
            return ssdc(total / self._num_images, self.grid, self.metric).cpu()
        assert self._value_sum is not None and self._value_count is not None
        if self.groups:
            return (self._value_sum.sum(dim=0) / self._value_count.sum(dim=0)).cpu()
        return (self._value_sum / self._value_count).cpu()  # 0/0 = NaN if no image was defined

    def replicates(self, counts: Tensor) -> Tensor:
        """The estimate on every resampling of the groups, ``(R, L)`` float64 CPU: replicate ``r`` weighs group ``g``'s
        sums by ``counts[r, g]`` (:func:`peanchor.metrics.bootstrap.bootstrap_counts`). Needs ``groups``."""
        if not self.groups:
            raise ValueError("replicates() needs SSDCAccumulator(..., groups=G) with G > 0")
        self._require_images("replicates")
        if counts.dim() != 2 or counts.shape[1] != self.groups:
            raise ValueError(f"counts must have shape (R, {self.groups}), got {tuple(counts.shape)}")
        if self.mode == "per_image":
            assert self._value_sum is not None and self._value_count is not None
            weights = counts.to(torch.float64)
            return (weights @ self._value_sum.cpu()) / (weights @ self._value_count.cpu().to(torch.float64))
        assert self._sim_sum is not None
        num_layers, groups, n, _ = self._sim_sum.shape
        weights = counts.to(device=self._sim_sum.device, dtype=torch.float64)  # (R, G)
        out = torch.empty(counts.shape[0], num_layers, dtype=torch.float64)
        # Spearman ignores the positive scale of a weighted sum, so the sums are ranked as they are.
        rows = max(1, (1 << 25) // (n * n))  # replicates per chunk: about 256 MB of float64 matrices
        for layer in range(num_layers):
            flat = self._sim_sum[layer].reshape(groups, n * n)  # (G, N*N)
            for start in range(0, counts.shape[0], rows):
                weighted = (weights[start : start + rows] @ flat).view(-1, n, n)  # (r, N, N)
                out[start : start + rows, layer] = ssdc(weighted, self.grid, self.metric).cpu()
        return out

    def confidence_interval(self, level: float = 0.95) -> tuple[Tensor, Tensor]:
        """Percentile bootstrap interval per layer: ``(low (L,), high (L,))``, float64 CPU.

        Replicates where SSDC is undefined (e.g. every Poisson weight 0) are ignored.
        """
        if not self.bootstrap:
            raise ValueError("confidence_interval() needs SSDCAccumulator(..., bootstrap=R) with R > 0")
        if not 0.0 < level < 1.0:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        self._require_images("confidence_interval")
        replicates = self._replicates()  # (R, L) float64 CPU
        tail = (1.0 - level) / 2
        q = torch.tensor([tail, 1.0 - tail], dtype=torch.float64)
        low, high = torch.nanquantile(replicates, q, dim=0)  # (L,), (L,)
        return low, high

    def _replicates(self) -> Tensor:
        """Bootstrap replicates of the per-layer SSDC estimate, ``(R, L)`` float64 CPU."""
        if self.mode == "mean_similarity":
            assert self._boot_sum is not None and self._boot_weight is not None
            # Spearman ignores the positive scale 1 / total weight, so the weighted sums are used as is.
            reps = ssdc(self._boot_sum, self.grid, self.metric)  # (R, L)
            reps[self._boot_weight == 0] = float("nan")  # empty resample: all-zero similarity
            return reps.cpu()
        assert self._values is not None
        values = self._values[: self._num_images].cpu()  # (n, L)
        defined = torch.isfinite(values)
        filled = torch.where(defined, values, 0.0)  # (n, L)
        mask = defined.to(torch.float64)  # (n, L)
        n = values.shape[0]
        # Fresh generator: the interval depends only on the stored values and the seed.
        generator = torch.Generator().manual_seed(self.seed)
        rows = max(1, (1 << 22) // n)
        out = []
        for start in range(0, self.bootstrap, rows):
            r = min(rows, self.bootstrap - start)
            draws = torch.randint(n, (r, n), generator=generator)  # (r, n) resampled image indices
            ones = torch.ones(r, n, dtype=torch.float64)
            counts = torch.zeros(r, n, dtype=torch.float64).scatter_add_(1, draws, ones)  # (r, n) draws per image
            out.append((counts @ filled) / (counts @ mask))  # (r, L) mean of the defined values
        return torch.cat(out)
