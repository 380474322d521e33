"""SSDC — Spatial Similarity Distance Correlation — and a streaming accumulator for it.

SSDC of a token-similarity matrix ``S`` (N x N, tokens laid out row-major on an H x W grid) is the
Spearman correlation, over the pairs ``i < j``, between ``S_ij`` and ``-D_ij``, where ``D`` is the
Manhattan (or Euclidean) distance between the grid positions of tokens ``i`` and ``j``. Higher
means spatially close tokens are more similar. The paper's estimator averages the per-image
cosine-similarity matrices over all evaluated images and takes the SSDC of that mean
(:class:`SSDCAccumulator`, ``mode="mean_similarity"``).

The grid distances ``D`` are :mod:`peanchor.metrics.grid`.

Imports: torch, numpy; :mod:`peanchor.metrics.grid`, :mod:`peanchor.metrics.spearman`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Literal, get_args

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from peanchor.metrics.grid import Metric, grid_distances
from peanchor.metrics.grid import check_grid as _check_grid
from peanchor.metrics.grid import check_metric as _check_metric
from peanchor.metrics.spearman import _rank_flat, _uses_numpy, sort_rows_with_payload, tie_runs, to_numpy_rows

__all__ = ["Metric", "Mode", "SSDCAccumulator", "grid_distances", "ssdc"]

Mode = Literal["mean_similarity", "per_image"]

# Bounds on the temporaries: similarity pairs ranked per chunk, and per-image similarity
# matrices (b, L, N, N) materialised per chunk. On the CPU the chunks are small, so that the
# similarities of one chunk are still in cache when their pairs are ranked (a 14x14 grid, 12
# layers: 4 images per similarity chunk, 13 matrices of 19,110 pairs per ranking chunk).
_RANK_CHUNK_ELEMENTS = 1 << 22
_SIM_CHUNK_ELEMENTS = 1 << 25
_CPU_RANK_CHUNK_ELEMENTS = 1 << 18
_CPU_SIM_CHUNK_ELEMENTS = 1 << 21
_NORMALISE_EPS = 1e-12
# Per-image similarities are multiplied out as the upper triangle in this many row blocks.
_ROW_BLOCKS = 3


@functools.lru_cache(maxsize=32)
def _pair_ranks(grid: tuple[int, int], metric: str) -> tuple[Tensor, Tensor]:
    """Cached per (grid, metric), on the CPU: the flat indices ``(P,)`` of the pairs ``i < j`` in an
    ``N*N`` matrix (row-major order of pairs), and the tie-averaged ranks ``(P,)`` of ``-D`` over them.
    Callers must not modify the returned tensors.
    """
    dist = grid_distances(grid, metric)  # (N, N)
    n = dist.shape[0]
    rows, cols = torch.triu_indices(n, n, offset=1)  # (P,), (P,)
    flat = rows * n + cols  # (P,)
    return flat, _rank_flat(-dist.reshape(1, -1)[:, flat])[0]  # (P,), (P,)


@functools.lru_cache(maxsize=32)
def _pair_reference(grid: tuple[int, int], metric: str, device: torch.device) -> tuple[Tensor, Tensor]:
    """Cached per (grid, metric, device): the pair indices of :func:`_pair_ranks`, and the ranks of
    ``-D`` centred and scaled to unit norm.

    With this, SSDC of a matrix is one dot product with its own standardised pair ranks.
    Callers must not modify the returned tensors.
    """
    flat, ranks = _pair_ranks(grid, metric)  # (P,), (P,)
    centred = ranks - ranks.mean()
    # For a 1-token or 1-pair grid this is 0/0 = NaN, and so is every SSDC: nothing to correlate.
    reference = centred / torch.linalg.vector_norm(centred)  # (P,)
    return flat.to(device), reference.to(device)


@functools.lru_cache(maxsize=32)
def _pair_twice_ranks(grid: tuple[int, int], metric: str) -> tuple[np.ndarray, float]:
    """Cached per (grid, metric), for the numpy path: twice the ranks of ``-D`` ``(P,)`` int64
    (tie-averaged ranks are multiples of 1/2, so these are exact integers), and
    ``sum((2R - (P+1))^2)``, four times the squared norm of the centred ranks.
    Callers must not modify the returned array.
    """
    _, ranks = _pair_ranks(grid, metric)  # (P,)
    twice = (2 * ranks).round().to(torch.int64).numpy()  # (P,)
    centred = twice - (twice.size + 1)  # (P,) 2 * (R - mean R), integers
    return twice, float(np.dot(centred, centred))


def _ssdc_rows_numpy(pairs: list[np.ndarray], twice_ranks: np.ndarray, reference_spread: float) -> np.ndarray:
    """SSDC of each row of pair similarities against the ``-D`` ranks ``twice_ranks / 2``.

    ``pairs`` is a list of column blocks ``(M, P_i)`` that concatenate to the pairs ``(M, P)``.

    One sort per row carries each pair's doubled ``-D`` rank ``2R`` along as the payload. Without
    ties the similarity rank at sorted position ``k`` is ``k + 1``, twice its centred value is
    ``w_k = 2k - (P-1)``, and ``sum_k w_k * payload_k`` (an exact integer) is 4 times the Spearman
    numerator ``sum (centred S rank) * (centred R)``; the squared norm of the centred similarity
    ranks is ``(P^3 - P)/12``. A run of ``t`` equal similarities at sorted positions ``a..b`` shares
    the rank of its mean position ``(a+b)/2``: each member's weight moves by ``2 * ((a+b)/2 - k)``
    and the squared norm loses ``(t^3 - t)/12``. That is exactly the tie-averaged Spearman of
    ``scipy.stats.spearmanr``. Constant rows and rows with a NaN give NaN.
    """
    m, p = pairs[0].shape[0], twice_ranks.size
    if p < 2:
        return np.full(m, np.nan)  # nothing to correlate (and the reference is NaN)
    sorted_twice, tied, undefined = sort_rows_with_payload(pairs, twice_ranks)  # (M, P), (M, P-1), (M,)
    # Integer weights keep the sum exact while it fits int64 (|sum| <= 2 P^3).
    weights = (2 * np.arange(p) - (p - 1)).astype(np.int64 if 2 * p**3 < 2**62 else np.float64)  # (P,)
    # einsum, not @: numpy's BLAS has its own thread pool, which ignores torch.set_num_threads.
    numerator = np.einsum("mp,p->m", sorted_twice, weights).astype(np.float64)  # (M,) 4 * sum(centred S * R)
    runs = tie_runs(tied)
    moved = 2 * (runs.average - runs.members) * sorted_twice.reshape(-1)[runs.members]  # (T,) exact
    numerator += np.bincount(runs.members // p, weights=moved, minlength=m)
    t = runs.length.astype(np.float64)  # (R,)
    spread = (p**3 - p) / 12 - np.bincount(runs.first // p, weights=(t**3 - t) / 12, minlength=m)  # (M,)
    undefined[runs.first[runs.length == p] // p] = True  # one run over the whole row: constant
    with np.errstate(invalid="ignore", divide="ignore"):
        # numerator / 4 over |centred S| * |centred R|, with |centred R| = sqrt(reference_spread) / 2
        rho = numerator / (2 * np.sqrt(spread) * np.sqrt(reference_spread))  # (M,)
    rho[undefined] = np.nan
    return np.clip(rho, -1.0, 1.0)  # rounding can step just past +-1; clip keeps NaN


def _rank_chunk(device: torch.device, p: int) -> int:
    """Rows of ``P`` pairs ranked at a time on ``device``."""
    elements = _CPU_RANK_CHUNK_ELEMENTS if _uses_numpy(device) else _RANK_CHUNK_ELEMENTS
    return max(1, elements // max(p, 1))


def _ssdc_of_pairs(pairs: Sequence[Tensor], grid: tuple[int, int], metric: str) -> Tensor:
    """SSDC of each row of pair similarities (pairs ``i < j``, row-major), float64 ``(M,)``.

    ``pairs`` is a list of column blocks ``(M, P_i)`` that concatenate to the pairs ``(M, P)``. CPU
    tensors go through numpy (:func:`_ssdc_rows_numpy`), which joins the blocks as it builds its sort
    keys; others through torch. Chunks of rows.
    """
    m, device = pairs[0].shape[0], pairs[0].device
    chunk = _rank_chunk(device, sum(block.shape[-1] for block in pairs))
    if _uses_numpy(device):
        twice_ranks, reference_spread = _pair_twice_ranks(grid, metric)  # (P,), scalar
        values = np.empty(m)  # (M,)
        for start in range(0, m, chunk):
            rows = [to_numpy_rows(block[start : start + chunk]) for block in pairs]  # [(m', P_i)]
            values[start : start + chunk] = _ssdc_rows_numpy(rows, twice_ranks, reference_spread)
        return torch.from_numpy(values)
    _, reference = _pair_reference(grid, metric, device)  # (P,)
    out = torch.empty(m, dtype=torch.float64, device=device)  # (M,)
    for start in range(0, m, chunk):
        rows = torch.cat([block[start : start + chunk] for block in pairs], dim=-1)  # (m', P)
        out[start : start + chunk] = _ssdc_rows_torch(rows, reference)
    return out


def _ssdc_rows_torch(pairs: Tensor, reference: Tensor) -> Tensor:
    """SSDC of each row of pair similarities ``(M, P)`` against the standardised ``-D`` ranks
    ``reference`` ``(P,)`` (from :func:`_pair_reference`), with torch on any device: float64 ``(M,)``."""
    ranks = _rank_flat(pairs)  # (M, P) float64, NaN rows where pairs have a NaN
    centred = ranks - ranks.mean(dim=-1, keepdim=True)
    norm = torch.linalg.vector_norm(centred, dim=-1)  # (M,) 0 for a constant row -> NaN below
    return ((centred @ reference) / norm).clamp(-1.0, 1.0)  # rounding can step just past +-1


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
    n = h * w
    _check_similarity(similarity, n)
    flat, _ = _pair_reference((h, w), metric, similarity.device)  # (P,)
    rows = similarity.reshape(-1, n * n)  # (M, N*N)
    m, chunk = rows.shape[0], _rank_chunk(similarity.device, flat.numel())
    out = torch.empty(m, dtype=torch.float64, device=similarity.device)  # (M,)
    for start in range(0, m, chunk):
        pairs = rows[start : start + chunk].index_select(-1, flat)  # (m', P)
        out[start : start + chunk] = _ssdc_of_pairs([pairs], (h, w), metric)
    return out.reshape(similarity.shape[:-2])


@functools.lru_cache(maxsize=32)
def _row_blocks(n: int, device: torch.device) -> tuple[tuple[int, int, Tensor], ...]:
    """Cached per (N, device): :data:`_ROW_BLOCKS` row blocks ``(a, b)`` of the ``N x N`` upper
    triangle, each with the flat indices ``(P_block,)`` of its pairs ``i < j`` inside the block
    product ``X[a:b] X[a:]^T`` of shape ``(b - a, N - a)``. Block after block, the pairs come out in
    the row-major order of :func:`_pair_ranks`.
    """
    bounds = [n * r // _ROW_BLOCKS for r in range(_ROW_BLOCKS)] + [n]
    blocks = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        if b > a:
            rows, cols = torch.triu_indices(b - a, n - a, offset=1)  # within the block product
            blocks.append((a, b, (rows * (n - a) + cols).to(device)))
    return tuple(blocks)


def _cosine_pair_blocks(x: Tensor) -> list[Tensor]:
    """``(..., N, D)`` tokens -> cosine similarities of the pairs ``i < j`` (row-major), the same as
    ``F.normalize`` (eps 1e-12), a matmul and the upper triangle; as a list of column blocks
    ``(M, P_i)``, ``M`` the product of the leading dims, that concatenate to ``(M, P)``.

    Only the upper triangle is multiplied out, in :data:`_ROW_BLOCKS` row blocks (row block ``a:b``
    against columns ``a:``: 2/3 of a full matmul's work for 3 blocks). The products are of the raw
    tokens, rescaled afterwards by the inverse norms ``1 / max(|x_i|, eps)`` from their diagonals,
    instead of first writing a normalised copy of the ``N x D`` tokens. Where a squared norm is not
    safely inside the floating range (a token norm above ~1e19, or below ~3e-10 but not zero, in
    float32; or NaN), the tokens are normalised first instead. That check syncs once per call on a GPU.
    """
    blocks = _row_blocks(x.shape[-2], x.device)
    grams = [torch.matmul(x[..., a:b, :], x[..., a:, :].transpose(-1, -2)) for a, b, _ in blocks]  # (..., b-a, N-a)
    squared = torch.cat([g.diagonal(dim1=-2, dim2=-1) for g in grams], dim=-1)  # (..., N) squared norms
    finfo = torch.finfo(x.dtype)
    safe = (squared == 0) | ((squared >= finfo.tiny**0.5) & (squared <= finfo.max))  # (..., N)
    if bool(safe.all()):
        inverse = squared.sqrt().clamp_min(_NORMALISE_EPS).reciprocal()  # (..., N)
        for g, (a, b, _) in zip(grams, blocks):
            g.mul_(inverse[..., a:b, None]).mul_(inverse[..., None, a:])  # (..., b-a, N-a)
    else:
        unit = F.normalize(x, dim=-1, eps=_NORMALISE_EPS)  # (..., N, D)
        grams = [torch.matmul(unit[..., a:b, :], unit[..., a:, :].transpose(-1, -2)) for a, b, _ in blocks]
    # index_select on 2-D rows: on the CPU it is several times faster than on the last of 3+ dims.
    return [g.reshape(-1, g.shape[-2] * g.shape[-1]).index_select(-1, index) for g, (_, _, index) in zip(grams, blocks)]


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

    Bootstrap (``bootstrap=R > 0``): in mean_similarity mode every image gets ``R`` independent
    Poisson(1) weights (streaming Poisson bootstrap) and ``R`` weighted similarity sums
    ``(R, L, N, N)`` are kept in float32 (about 1.8 MB per replicate for L=12, N=196), so no image
    is stored. The weights come from a CPU ``torch.Generator`` seeded with ``seed`` and are drawn
    image by image, so the result does not depend on how the images were split into batches. In per_image mode the per-image values are kept
    (``num_images x L`` floats) and resampled with replacement in :meth:`confidence_interval`.

    State lives on the device of the first batch; :meth:`compute` returns float64 on the CPU. Tokens
    may be bf16/fp16/fp32 (similarities are computed in float32) or float64 (kept in float64).
    Note that the float32 similarity matmul follows torch's global TF32 settings on CUDA.

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
        self.reset()

    # ------------------------------------------------------------------ state
    def reset(self) -> None:
        """Forget every image (and restart the bootstrap random stream from ``seed``)."""
        self._device: torch.device | None = None
        self._num_layers: int | None = None
        self._num_images = 0
        # mean_similarity
        self._sim_sum: Tensor | None = None  # (L, N, N) float64
        self._boot_sum: Tensor | None = None  # (R, L, N, N) float32
        self._boot_weight: Tensor | None = None  # (R,) float64
        # per_image
        self._value_sum: Tensor | None = None  # (L,) float64, sum of the defined per-image SSDCs
        self._value_count: Tensor | None = None  # (L,) int64, how many were defined
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
            self._sim_sum = torch.zeros(num_layers, n, n, dtype=f64, device=device)
            if self.bootstrap:
                self._boot_sum = torch.zeros(self.bootstrap, num_layers, n, n, dtype=torch.float32, device=device)
                self._boot_weight = torch.zeros(self.bootstrap, dtype=f64, device=device)
        else:
            self._value_sum = torch.zeros(num_layers, dtype=f64, device=device)
            self._value_count = torch.zeros(num_layers, dtype=torch.int64, device=device)
            if self.bootstrap:
                self._values = torch.empty(64, num_layers, dtype=f64, device=device)

    # ----------------------------------------------------------------- update
    def update(self, tokens: Tensor) -> None:
        """Add a batch of images.

        Args:
            tokens: ``(B, L, N, D)`` spatial tokens (CLS dropped), ``N = H * W`` in row-major order.
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
        if self.mode == "mean_similarity" and self.bootstrap:
            self._update_mean_bootstrap(F.normalize(tokens.to(dtype), dim=-1, eps=_NORMALISE_EPS))  # unit tokens
        elif self.mode == "mean_similarity":
            # Layer by layer, so that the unit tokens of a layer stay in cache: one batched matmul gives every
            # image's similarity matrix, summed over the batch in float64.
            for layer in range(num_layers):
                x = F.normalize(tokens[:, layer].to(dtype), dim=-1, eps=_NORMALISE_EPS)  # (B, N, D) unit tokens
                self._sim_sum[layer] += torch.matmul(x, x.transpose(-1, -2)).sum(dim=0, dtype=torch.float64)
        else:
            self._update_per_image(tokens, dtype)
        self._num_images += b

    def _image_chunk(self, x: Tensor) -> int:
        _, num_layers, n, _ = x.shape
        elements = _CPU_SIM_CHUNK_ELEMENTS if x.device.type == "cpu" else _SIM_CHUNK_ELEMENTS
        return max(1, elements // (num_layers * n * n))

    def _update_mean_bootstrap(self, x: Tensor) -> None:
        b, num_layers, n, _ = x.shape
        assert self._sim_sum is not None and self._boot_sum is not None and self._boot_weight is not None
        # (B, R): drawn image-major, so the stream is the same whatever the batch split.
        weights = torch.poisson(torch.ones(b, self.bootstrap), generator=self._generator)
        weights = weights.to(device=x.device, dtype=x.dtype)  # (B, R)
        chunk = self._image_chunk(x)
        for start in range(0, b, chunk):
            xs = x[start : start + chunk]  # (b', L, N, D)
            sims = torch.matmul(xs, xs.transpose(-1, -2))  # (b', L, N, N)
            self._sim_sum += sims.sum(dim=0, dtype=torch.float64)
            flat = sims.reshape(sims.shape[0], -1)  # (b', L*N*N)
            weighted = weights[start : start + chunk].T @ flat  # (R, L*N*N)
            self._boot_sum += weighted.view(self.bootstrap, num_layers, n, n).to(torch.float32)
        self._boot_weight += weights.sum(dim=0, dtype=torch.float64)

    def _update_per_image(self, tokens: Tensor, dtype: torch.dtype) -> None:
        assert self._value_sum is not None and self._value_count is not None
        values = []
        chunk = self._image_chunk(tokens)
        for start in range(0, tokens.shape[0], chunk):
            xs = tokens[start : start + chunk].to(dtype)  # (b', L, N, D)
            pairs = _cosine_pair_blocks(xs)  # [(b' * L, P_i)]
            values.append(_ssdc_of_pairs(pairs, self.grid, self.metric).view(xs.shape[:2]))  # (b', L)
        batch_values = torch.cat(values)  # (B, L) float64
        defined = torch.isfinite(batch_values)  # (B, L)
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

    # ---------------------------------------------------------------- results
    def _require_images(self, what: str) -> None:
        if self._num_images == 0:
            raise ValueError(f"SSDCAccumulator.{what}() needs at least one image; call update() first")

    def compute(self) -> Tensor:
        """SSDC per layer, float64 CPU tensor ``(L,)`` (NaN where undefined)."""
        self._require_images("compute")
        if self.mode == "mean_similarity":
            assert self._sim_sum is not None
            mean_similarity = self._sim_sum / self._num_images  # (L, N, N)
            return ssdc(mean_similarity, self.grid, self.metric).cpu()
        assert self._value_sum is not None and self._value_count is not None
        return (self._value_sum / self._value_count).cpu()  # 0/0 = NaN if no image was defined

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
