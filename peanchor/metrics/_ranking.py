"""The fast tie-averaged ranking behind :func:`peanchor.metrics.rankdata`, :func:`~peanchor.metrics.spearman` and
:func:`~peanchor.metrics.ssdc` (private: the public functions say what is computed, this module how fast).

Ranks are the ``"average"`` method of ``scipy.stats.rankdata``: sort each row once, find the runs of equal values,
and give every element the mean of the first and last (1-based) position of its run. There are two implementations
of that one ranking, with the same results (tests/metrics/test_spearman.py checks both against scipy):

* CPU tensors are ranked with numpy (:func:`sort_rows_with_payload`, :func:`tie_runs`). Values that
  float32 holds exactly (float32, float16, bfloat16, bool, 8- and 16-bit integers) are sorted as
  float64 keys that carry the value in their high bits and a 28-bit integer payload (the element's
  index) in the low mantissa bits, which converting a float32 to float64 leaves zero: one plain
  ``np.sort`` of those keys gives the order and the payload together, several times faster than a
  stable argsort; rounding the sorted keys back to float32 gives the sorted values, whose equal
  neighbours are the ties. Other dtypes (float64, 32/64-bit integers) use ``np.argsort``.
* Other devices use torch: ``torch.sort``, then run boundaries by running max/min.

Imports: torch, numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

__all__ = ["SortedRows", "TieRuns", "rank_rows", "sort_rows_with_payload", "tie_runs", "to_numpy_rows", "uses_numpy"]

# Rows are ranked in chunks of at most this many elements, to bound the temporaries (sort values,
# sort indices, run boundaries: a few int64/float64 copies of the chunk). The numpy (CPU) path
# makes several passes over each chunk, so its chunk is small enough to stay in the L2 cache.
_CHUNK_ELEMENTS = 1 << 22
_CPU_CHUNK_ELEMENTS = 1 << 18

# float32 -> float64 leaves the 29 low mantissa bits zero. A payload below 2**28 written there keeps
# the key within half a float32 step above the value in magnitude: keys of different values keep
# their order, keys of equal values differ only in these bits, and rounding a key back to float32
# gives the value again.
_PAYLOAD_BITS = 28
_PAYLOAD_MASK = (1 << _PAYLOAD_BITS) - 1
# numpy dtypes whose every value float32 represents exactly (bfloat16 is made float32 before numpy).
_FLOAT32_EXACT = {np.dtype(t) for t in (np.float32, np.float16, np.bool_, np.int8, np.uint8, np.int16, np.uint16)}


def uses_numpy(device: torch.device) -> bool:
    """Whether tensors on ``device`` are ranked with numpy (the CPU) rather than torch."""
    return device.type == "cpu"


def _rank_rows_torch(x: Tensor) -> Tensor:
    """Tie-averaged 1-based ranks of each row of a 2-D tensor, as float64 (torch, any device)."""
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
    ranks = torch.empty_like(average).scatter_(-1, order, average)  # back to the input order
    if x.is_floating_point():
        # NaN compares unequal to itself, so it would get a rank of its own: propagate it instead.
        ranks = ranks.masked_fill(torch.isnan(x).any(dim=-1, keepdim=True), float("nan"))
    return ranks


def to_numpy_rows(x: Tensor) -> np.ndarray:
    """A CPU tensor as a numpy array, without a copy where possible; bfloat16 becomes float32 (exact)."""
    x = x.detach().resolve_conj().resolve_neg()
    if x.dtype == torch.bfloat16:
        x = x.float()
    return x.numpy()


class SortedRows(NamedTuple):
    """What :func:`sort_rows_with_payload` returns."""

    payload: np.ndarray  # (M, P) int64, the payload in each row's ascending order of the values
    tied: np.ndarray  # (M, P-1) bool, True where sorted neighbours k and k+1 are equal
    nan: np.ndarray  # (M,) bool, True for rows with a NaN (their order is meaningless)


def sort_rows_with_payload(values: np.ndarray | Sequence[np.ndarray], payload: np.ndarray) -> SortedRows:
    """Sort every row of ``values`` and carry an integer ``payload`` along.

    Args:
        values: ``(M, P)`` real numpy array, or a list of column blocks ``(M, P_i)`` (one dtype)
            that concatenate to it: they are joined while they are converted to sort keys.
        payload: ``(P,)`` non-negative int64, one number per column.

    Returns:
        :class:`SortedRows`. Equal values come in any order: they share one rank.

    >>> sort_rows_with_payload(np.array([[0.5, -1.0, 0.5, -0.0, 0.0]], np.float32), np.arange(5)).tied
    array([[False,  True, False,  True]])
    """
    blocks = [values] if isinstance(values, np.ndarray) else list(values)
    dtype = blocks[0].dtype
    if dtype in _FLOAT32_EXACT and payload.size > 0 and int(payload.max()) <= _PAYLOAD_MASK:
        keys = np.empty((blocks[0].shape[0], payload.size))  # (M, P) float64
        start = 0
        for block in blocks:  # exact conversion; -0.0 + 0.0 is +0.0: one key for zero
            np.add(block, 0.0, out=keys[:, start : start + block.shape[1]])
            start += block.shape[1]
        bits = keys.view(np.int64)  # (M, P) the same memory as integers
        bits |= payload  # (M, P) payload in the low mantissa bits
        keys.sort(axis=-1)  # plain (unstable) sort
        # A payload turns +-inf into NaN, and np.sort puts NaN last: a row whose last key is NaN had
        # an inf or a NaN. Those rows (rare) are sorted again by value below.
        redo = np.isnan(keys[:, -1])  # (M,)
        values32 = keys.astype(np.float32)  # (M, P) each sorted key rounded back to its value
        tied = values32[:, 1:] == values32[:, :-1]  # (M, P-1)
        sorted_payload = bits  # (M, P) the keys' memory, reused
        sorted_payload &= _PAYLOAD_MASK
        nan = np.zeros(keys.shape[0], dtype=bool)  # (M,)
        if redo.any():
            again = _argsort_with_payload(np.concatenate(blocks, axis=1)[redo], payload)
            sorted_payload[redo], tied[redo], nan[redo] = again
        return SortedRows(sorted_payload, tied, nan)
    return _argsort_with_payload(np.concatenate(blocks, axis=1) if len(blocks) > 1 else blocks[0], payload)


def _argsort_with_payload(values: np.ndarray, payload: np.ndarray) -> SortedRows:
    """:func:`sort_rows_with_payload` for any real dtype, by ``np.argsort`` of the values themselves."""
    order = np.argsort(values, axis=-1)  # (M, P) NaN last
    ordered = np.take_along_axis(values, order, axis=-1)  # (M, P)
    tied = ordered[:, 1:] == ordered[:, :-1]  # float ==: -0.0 == 0.0, inf == inf
    nan = np.isnan(ordered[:, -1]) if values.dtype.kind == "f" and values.shape[1] else np.zeros(len(values), bool)
    return SortedRows(payload[order], tied, nan)


class TieRuns(NamedTuple):
    """The runs of equal values in sorted rows, as flat positions ``row * P + k`` into ``(M, P)``."""

    first: np.ndarray  # (R,) int64 position of each run's first element
    length: np.ndarray  # (R,) int64 elements in each run, >= 2
    members: np.ndarray  # (T,) int64 position of every element in a run, run by run
    average: np.ndarray  # (T,) float64 mean position of that element's run


def tie_runs(tied: np.ndarray) -> TieRuns:
    """Group the tie flags ``(M, P-1)`` of :func:`sort_rows_with_payload` into runs.

    Ties between float values are rare but not absent (the 19,110 float32 pair similarities of one
    image collide 10-20 times), so the work here is proportional to the ties, not to ``M * P``.

    >>> runs = tie_runs(np.array([[False, True, True], [True, False, False]]))
    >>> runs.first.tolist(), runs.length.tolist(), runs.average.tolist()
    ([1, 4], [3, 2], [2.0, 2.0, 2.0, 4.5, 4.5])
    """
    gaps = tied.shape[1]
    q = np.flatnonzero(tied)  # (Q,) into (M, P-1): sorted element k equals element k+1
    if q.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return TieRuns(empty, empty, empty, np.empty(0))
    q += q // gaps  # (Q,) flat positions in (M, P); neighbouring rows' flags are >= 2 apart
    new_run = np.ones(q.size, dtype=bool)
    np.not_equal(q[1:], q[:-1] + 1, out=new_run[1:])  # a gap in the flags starts a new run
    first = q[new_run]  # (R,)
    last = q[np.append(new_run[1:], True)] + 1  # (R,) the run's last flag ties k with k + 1
    length = last - first + 1  # (R,)
    offsets = np.cumsum(length) - length  # (R,) where each run's members start
    members = np.arange(int(length.sum())) - np.repeat(offsets - first, length)  # (T,)
    average = np.repeat((first + last) / 2, length)  # (T,)
    return TieRuns(first, length, members, average)


def _rank_rows_numpy(values: np.ndarray) -> np.ndarray:
    """Tie-averaged 1-based ranks of each row of ``values`` ``(M, P)``, float64 (numpy)."""
    m, p = values.shape
    order, tied, nan = sort_rows_with_payload(values, np.arange(p, dtype=np.int64))  # (M, P), (M, P-1), (M,)
    ranks = np.empty((m, p))
    ranks[:] = np.arange(1, p + 1)  # (M, P) 1-based sorted positions: the ranks where nothing ties
    runs = tie_runs(tied)
    # Flat run mean -> 1-based position within its row.
    ranks.reshape(-1)[runs.members] = runs.average - (runs.members // p) * p + 1
    out = np.empty_like(ranks)
    np.put_along_axis(out, order, ranks, axis=-1)  # (M, P) back to the input order
    out[nan] = np.nan
    return out


def rank_rows(x: Tensor) -> Tensor:
    """Tie-averaged ranks of ``(M, P)`` in chunks of rows: numpy for CPU tensors, torch elsewhere."""
    m, p = x.shape
    if m == 0 or p == 0:
        return torch.empty(m, p, dtype=torch.float64, device=x.device)
    if uses_numpy(x.device):
        rows = max(1, _CPU_CHUNK_ELEMENTS // p)
        out = np.empty((m, p))
        for i in range(0, m, rows):
            out[i : i + rows] = _rank_rows_numpy(to_numpy_rows(x[i : i + rows]))
        return torch.from_numpy(out)
    rows = max(1, _CHUNK_ELEMENTS // p)
    if m <= rows:
        return _rank_rows_torch(x)
    return torch.cat([_rank_rows_torch(x[i : i + rows]) for i in range(0, m, rows)])
