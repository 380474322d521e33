"""The fast path behind :func:`peanchor.metrics.ssdc` (private: ``ssdc`` says what is computed, this module how
fast): the ranks of ``-D`` over the pairs cached per grid, SSDC of many rows of pair similarities at once, and the
cosine similarities of only the upper triangle for per-image SSDC.

On the CPU the pairs go through numpy (:func:`_ssdc_rows_numpy`: one sort per row carrying the ``-D`` rank
along, exact integer arithmetic for the numerator); elsewhere through torch (:func:`_ssdc_rows_torch`: ranks,
then one dot product with the standardised ``-D`` ranks). tests/metrics/test_ssdc.py checks both against the definition
written out with scipy.

Imports: torch, numpy; :mod:`peanchor.metrics` (grid, _ranking).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from peanchor.metrics._ranking import rank_rows, sort_rows_with_payload, tie_runs, to_numpy_rows, uses_numpy
from peanchor.metrics.grid import grid_distances

__all__ = ["NORMALISE_EPS", "cosine_pair_blocks", "image_chunk", "ssdc_of_matrices", "ssdc_of_pairs"]

# Bounds on the temporaries: similarity pairs ranked per chunk, and per-image similarity
# matrices (b, L, N, N) materialised per chunk. On the CPU the chunks are small, so that the
# similarities of one chunk are still in cache when their pairs are ranked (a 14x14 grid, 12
# layers: 4 images per similarity chunk, 13 matrices of 19,110 pairs per ranking chunk).
_RANK_CHUNK_ELEMENTS = 1 << 22
_SIM_CHUNK_ELEMENTS = 1 << 25
_CPU_RANK_CHUNK_ELEMENTS = 1 << 18
_CPU_SIM_CHUNK_ELEMENTS = 1 << 21
NORMALISE_EPS = 1e-12
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
    return flat, rank_rows(-dist.reshape(1, -1)[:, flat])[0]  # (P,), (P,)


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


def image_chunk(tokens: Tensor) -> int:
    """Images of ``tokens (B, L, N, D)`` whose similarity matrices ``(b, L, N, N)`` are materialised at a time."""
    _, num_layers, n, _ = tokens.shape
    elements = _CPU_SIM_CHUNK_ELEMENTS if tokens.device.type == "cpu" else _SIM_CHUNK_ELEMENTS
    return max(1, elements // (num_layers * n * n))


def _rank_chunk(device: torch.device, p: int) -> int:
    """Rows of ``P`` pairs ranked at a time on ``device``."""
    elements = _CPU_RANK_CHUNK_ELEMENTS if uses_numpy(device) else _RANK_CHUNK_ELEMENTS
    return max(1, elements // max(p, 1))


def ssdc_of_pairs(pairs: Sequence[Tensor], grid: tuple[int, int], metric: str) -> Tensor:
    """SSDC of each row of pair similarities (pairs ``i < j``, row-major), float64 ``(M,)``.

    ``pairs`` is a list of column blocks ``(M, P_i)`` that concatenate to the pairs ``(M, P)``. CPU
    tensors go through numpy (:func:`_ssdc_rows_numpy`), which joins the blocks as it builds its sort
    keys; others through torch. Chunks of rows.
    """
    m, device = pairs[0].shape[0], pairs[0].device
    chunk = _rank_chunk(device, sum(block.shape[-1] for block in pairs))
    if uses_numpy(device):
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
    ranks = rank_rows(pairs)  # (M, P) float64, NaN rows where pairs have a NaN
    centred = ranks - ranks.mean(dim=-1, keepdim=True)
    norm = torch.linalg.vector_norm(centred, dim=-1)  # (M,) 0 for a constant row -> NaN below
    return ((centred @ reference) / norm).clamp(-1.0, 1.0)  # rounding can step just past +-1



def ssdc_of_matrices(similarity: Tensor, grid: tuple[int, int], metric: str) -> Tensor:
    """SSDC of every ``(N, N)`` matrix of ``similarity (..., N, N)`` (checked by the caller): float64 ``(M,)``,
    ``M`` the product of the leading dims. The upper-triangle pairs are gathered and ranked a chunk of rows at a
    time."""
    h, w = grid
    n = h * w
    flat, _ = _pair_reference((h, w), metric, similarity.device)  # (P,)
    rows = similarity.reshape(-1, n * n)  # (M, N*N)
    m, chunk = rows.shape[0], _rank_chunk(similarity.device, flat.numel())
    out = torch.empty(m, dtype=torch.float64, device=similarity.device)  # (M,)
    for start in range(0, m, chunk):
        pairs = rows[start : start + chunk].index_select(-1, flat)  # (m', P)
        out[start : start + chunk] = ssdc_of_pairs([pairs], (h, w), metric)
    return out


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


def cosine_pair_blocks(x: Tensor) -> list[Tensor]:
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
        inverse = squared.sqrt().clamp_min(NORMALISE_EPS).reciprocal()  # (..., N)
        for g, (a, b, _) in zip(grams, blocks):
            g.mul_(inverse[..., a:b, None]).mul_(inverse[..., None, a:])  # (..., b-a, N-a)
    else:
        unit = F.normalize(x, dim=-1, eps=NORMALISE_EPS)  # (..., N, D)
        grams = [torch.matmul(unit[..., a:b, :], unit[..., a:, :].transpose(-1, -2)) for a, b, _ in blocks]
    # index_select on 2-D rows: on the CPU it is several times faster than on the last of 3+ dims.
    return [g.reshape(-1, g.shape[-2] * g.shape[-1]).index_select(-1, index) for g, (_, _, index) in zip(grams, blocks)]
