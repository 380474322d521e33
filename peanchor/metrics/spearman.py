"""Spearman rank correlation in torch: batched, tie-averaged, equal to ``scipy.stats.spearmanr``.

Ranks are the ``"average"`` method of ``scipy.stats.rankdata``, and Spearman's rho is the Pearson correlation of
the two rank vectors. How the rows are ranked fast (numpy sort keys on the CPU, torch elsewhere) is the private
:mod:`peanchor.metrics._ranking`.

Ties and special values, on every device: ``-0.0`` and ``+0.0`` are equal (they tie), ``+-inf``
are ordinary values, and a row that contains a NaN gets NaN ranks throughout (as
``scipy.stats.rankdata`` with its default ``nan_policy="propagate"``), so its Spearman is NaN.

Imports: torch; :mod:`peanchor.metrics._ranking`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from peanchor.metrics._ranking import rank_rows

__all__ = ["rankdata", "spearman"]


def rankdata(x: Tensor) -> Tensor:
    """Tie-averaged, 1-based ranks along the last dimension (``scipy.stats.rankdata``, ``"average"``).

    ``-0.0`` ties with ``+0.0``; a row that contains a NaN is NaN throughout (scipy's default
    ``nan_policy="propagate"``). CPU tensors are ranked with numpy, others with torch: same ranks.

    Args:
        x: real tensor ``(..., P)``; leading dimensions are independent rows.

    Returns:
        float64 tensor of the same shape, on the same device.

    >>> rankdata(torch.tensor([10, 30, 20, 20]))
    tensor([1.0000, 4.0000, 2.5000, 2.5000], dtype=torch.float64)
    >>> rankdata(torch.tensor([[3.0, 1.0, 2.0], [5.0, 5.0, 5.0]]))
    tensor([[3., 1., 2.],
            [2., 2., 2.]], dtype=torch.float64)
    >>> rankdata(torch.tensor([[0.0, -0.0, -1.0], [1.0, float("nan"), 2.0]]))
    tensor([[2.5000, 2.5000, 1.0000],
            [   nan,    nan,    nan]], dtype=torch.float64)
    """
    if x.is_complex():
        raise ValueError(f"rankdata needs a real tensor, got dtype {x.dtype}")
    if x.dim() == 0:
        raise ValueError("rankdata needs at least one dimension, got a 0-d tensor")
    rows = math.prod(x.shape[:-1])  # not reshape(-1, P): ambiguous for P = 0, which scipy ranks as empty
    return rank_rows(x.reshape(rows, x.shape[-1])).reshape(x.shape)


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

    Examples:
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
