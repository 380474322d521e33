"""Spearman rank correlation in torch: batched, tie-averaged, equal to ``scipy.stats.spearmanr``.

Ranks are computed without any Python loop over rows: sort each row once, mark where a run of
equal values starts and ends, and give every element the mean of the first and last (1-based)
position of its run. That is exactly the ``"average"`` method of ``scipy.stats.rankdata``.
Spearman's rho is then the Pearson correlation of the two rank vectors.

Inputs must be finite; NaNs are not treated specially.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["rankdata", "spearman"]

# Rows are ranked in chunks of at most this many elements, to bound the temporaries (sort values,
# sort indices, run boundaries: a few int64/float64 copies of the chunk).
_CHUNK_ELEMENTS = 1 << 22


def _rank_rows(x: Tensor) -> Tensor:
    """Tie-averaged 1-based ranks of each row of a 2-D tensor, as float64."""
    m, p = x.shape
    if x.dtype == torch.bool:
        x = x.to(torch.uint8)  # sort has no bool kernel on every backend
    # Sort in the input dtype: ties are detected exactly, even for int64 beyond 2**53.
    values, order = torch.sort(x, dim=-1, stable=True)  # (M, P), (M, P)
    positions = torch.arange(p, device=x.device).expand(m, p)  # (M, P) 0-based sorted positions
    changes = values[:, 1:] != values[:, :-1]  # (M, P-1) True where a new run of equal values begins
    true_col = torch.ones(m, 1, dtype=torch.bool, device=x.device)
    starts = torch.cat([true_col, changes], dim=-1)  # (M, P)
    ends = torch.cat([changes, true_col], dim=-1)  # (M, P)
    # First position of each element's run: running maximum of the run starts seen so far.
    first = torch.cummax(torch.where(starts, positions, 0), dim=-1).values  # (M, P)
    # Last position: running minimum of the run ends, scanning from the right.
    last = torch.where(ends, positions, p - 1).flip(-1)
    last = torch.cummin(last, dim=-1).values.flip(-1)  # (M, P)
    average = (first + last).to(torch.float64) / 2 + 1  # (M, P) mean 1-based position of the run
    return torch.empty_like(average).scatter_(-1, order, average)  # back to the input order


def _rank_flat(x: Tensor) -> Tensor:
    """:func:`_rank_rows` over ``(M, P)`` in chunks of rows."""
    m, p = x.shape
    if m == 0 or p == 0:
        return torch.empty(m, p, dtype=torch.float64, device=x.device)
    rows = max(1, _CHUNK_ELEMENTS // p)
    if m <= rows:
        return _rank_rows(x)
    return torch.cat([_rank_rows(x[i : i + rows]) for i in range(0, m, rows)])


def rankdata(x: Tensor) -> Tensor:
    """Tie-averaged, 1-based ranks along the last dimension (``scipy.stats.rankdata``, ``"average"``).

    Args:
        x: real tensor ``(..., P)``; leading dimensions are independent rows.

    Returns:
        float64 tensor of the same shape, on the same device.

    >>> rankdata(torch.tensor([10, 30, 20, 20]))
    tensor([1.0000, 4.0000, 2.5000, 2.5000], dtype=torch.float64)
    >>> rankdata(torch.tensor([[3.0, 1.0, 2.0], [5.0, 5.0, 5.0]]))
    tensor([[3., 1., 2.],
            [2., 2., 2.]], dtype=torch.float64)
    """
    if x.is_complex():
        raise ValueError(f"rankdata needs a real tensor, got dtype {x.dtype}")
    if x.dim() == 0:
        raise ValueError("rankdata needs at least one dimension, got a 0-d tensor")
    p = x.shape[-1]
    return _rank_flat(x.reshape(-1, p)).reshape(x.shape)


def _standardised_ranks(x: Tensor) -> Tensor:
    """Ranks along the last dim, centred and scaled to unit norm (float64, shape of ``x``).

    A constant row has zero spread and becomes NaN, so any correlation with it is NaN (as scipy).
    """
    ranks = rankdata(x)  # (..., P)
    centred = ranks - ranks.mean(dim=-1, keepdim=True)  # (..., P)
    return centred / torch.linalg.vector_norm(centred, dim=-1, keepdim=True)


def _result_dtype(*tensors: Tensor) -> torch.dtype:
    """float64 if any input is float64 or none is floating point; float32 otherwise."""
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    if dtype == torch.float64 or not dtype.is_floating_point:
        return torch.float64
    return torch.float32


def spearman(x: Tensor, y: Tensor) -> Tensor:
    """Spearman rank correlation along the last dimension, batched over (broadcast) leading dims.

    Ties get average ranks, so the result equals ``scipy.stats.spearmanr`` row by row. The leading
    dimensions of ``x`` and ``y`` broadcast against each other: a fixed ``y`` of shape ``(P,)`` is
    ranked once and correlated with every row of ``x`` of shape ``(B, L, P)``. A constant row gives
    NaN. Computed in float64; returned as float64 if an input is float64 (or integer), else float32.

    Args:
        x: real tensor ``(..., P)``.
        y: real tensor ``(..., P)``, leading dims broadcastable with those of ``x``.

    Returns:
        ``(...)``: one coefficient per row.

    >>> spearman(torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.tensor([10.0, 20.0, 30.0, 40.0]))
    tensor(1.)
    >>> x = torch.tensor([[1.0, 2.0, 3.0, 4.0], [4.0, 3.0, 2.0, 1.0]])
    >>> spearman(x, torch.tensor([1.0, 2.0, 2.0, 3.0]))
    tensor([ 0.9487, -0.9487])
    """
    if x.dim() == 0 or y.dim() == 0:
        raise ValueError("spearman needs tensors with at least one dimension (..., P)")
    if x.shape[-1] != y.shape[-1]:
        raise ValueError(f"spearman: last dimensions differ, x {tuple(x.shape)} vs y {tuple(y.shape)}")
    try:
        torch.broadcast_shapes(x.shape[:-1], y.shape[:-1])
    except RuntimeError as err:
        raise ValueError(
            f"spearman: leading dimensions do not broadcast, x {tuple(x.shape)} vs y {tuple(y.shape)}"
        ) from err
    zx = _standardised_ranks(x)  # (..., P)
    zy = _standardised_ranks(y)  # (..., P)
    rho = (zx * zy).sum(dim=-1).clamp(-1.0, 1.0)  # (...) rounding can step just past +-1
    return rho.to(_result_dtype(x, y))
