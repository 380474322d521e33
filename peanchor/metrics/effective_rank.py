"""Effective rank (Roy & Vetterli, 2007): ``exp`` of the entropy of the normalised singular values of a matrix, and
its mean per layer over streamed images.

For one image and layer, with ``σ_1 ... σ_k`` the singular values of its patch tokens ``X (N, D)``, ``k = min(N, D)``,
``p_i = σ_i / Σ_j σ_j`` and ``H = -Σ_i p_i log p_i`` (``0 log 0 = 0``), the effective rank is ``exp(H)``: 1 for tokens
that all lie on one line, ``k`` for singular values that are all equal; undefined (NaN) for an all-zero matrix.

The singular values are taken one matrix at a time by the batched SVD (``torch.linalg.svdvals``), which, unlike
batched LU (:mod:`peanchor.metrics.linalg`), agrees with numpy's per-matrix SVD at the paper's sizes with the thread
counts analysis workers use (tests/metrics/test_linalg.py).

Imports: torch only.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["EffectiveRankAccumulator", "effective_rank"]


def effective_rank(tokens: Tensor) -> Tensor:
    """The effective rank of every ``(N, D)`` matrix of ``tokens (..., N, D)``: shape ``(...)``, in the tokens' dtype.

    >>> round(effective_rank(torch.eye(3, dtype=torch.float64)).item(), 12)  # three equal singular values
    3.0
    >>> round(effective_rank(torch.ones(4, 2, dtype=torch.float64)).item(), 12)  # rank one
    1.0
    """
    sigma = torch.linalg.svdvals(tokens)  # (..., k), descending, >= 0
    p = sigma / sigma.sum(dim=-1, keepdim=True)
    return torch.exp(-torch.special.xlogy(p, p).sum(dim=-1))


class EffectiveRankAccumulator:
    """The mean effective rank per layer over images: ``update(tokens (B, L, N, D))`` per batch, :meth:`compute`
    ``(L,)`` float64 on the CPU (an image whose tokens are all zero is left out of its layer's mean), :meth:`reset`,
    and :meth:`merge` of another accumulator's images (shards of one evaluation set).

    The SVD runs in float64 on the CPU and in float32 on a GPU (float64 tokens stay float64).

    >>> acc = EffectiveRankAccumulator()
    >>> acc.update(torch.eye(4).expand(2, 3, 4, 4))
    >>> acc.compute().tolist(), acc.max_rank
    ([4.0, 4.0, 4.0], 4)
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total: Tensor | None = None  # (L,) float64
        self.count: Tensor | None = None  # (L,) int64
        self.max_rank = 0  # min(N, D) of the tokens seen

    def update(self, tokens: Tensor) -> None:
        dtype = torch.float64 if tokens.dtype == torch.float64 or tokens.device.type == "cpu" else torch.float32
        values = effective_rank(tokens.to(dtype))  # (B, L)
        valid = torch.isfinite(values)
        total = torch.where(valid, values, torch.zeros_like(values)).sum(dim=0).to(torch.float64)
        count = valid.sum(dim=0)
        self.total = total if self.total is None else self.total + total
        self.count = count if self.count is None else self.count + count
        self.max_rank = min(tokens.shape[-2], tokens.shape[-1])

    def merge(self, other: EffectiveRankAccumulator) -> None:
        if other.total is None:
            return
        assert other.count is not None
        self.total = other.total.clone() if self.total is None else self.total + other.total.to(self.total.device)
        self.count = other.count.clone() if self.count is None else self.count + other.count.to(self.count.device)
        self.max_rank = max(self.max_rank, other.max_rank)

    def compute(self) -> Tensor:
        """``(L,)`` float64 on the CPU; NaN for a layer without an image."""
        if self.total is None or self.count is None:
            raise ValueError("the effective rank needs at least one batch")
        return (self.total / self.count).cpu()
