"""Effective rank per layer: how many directions one image's patch tokens spread over.

For one image and layer, with ``σ_1 ... σ_k`` the singular values of its patch tokens ``X (N, D)`` (the SSDC probe
point, ``k = min(N, D)``), ``p_i = σ_i / Σ_j σ_j`` and the entropy ``H = -Σ_i p_i log p_i`` (``0 log 0 = 0``), the
effective rank is ``exp(H)`` (Roy & Vetterli, 2007): 1 for tokens that all lie on one line, ``k`` for singular values
that are all equal. The lens reports its mean over the evaluation images, per layer, with tokens in order and under
RPI (one permutation per forward call, as SSDC; the mean over RPI draws). An image whose tokens are all zero has no
effective rank and is left out of its layer's mean.

The singular values are computed in float64 on the CPU and in float32 on a GPU (float64 tokens stay float64).

Imports: :mod:`peanchor.lenses` (base, registry), :mod:`peanchor.fileio`; torch when measuring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peanchor.fileio import Number
from peanchor.lenses.base import Lens, LensBatch, mean_over_draws
from peanchor.lenses.registry import register_lens

__all__ = ["EffectiveRankLayers", "EffectiveRankLens", "effective_rank"]


@dataclass(kw_only=True)
class EffectiveRankLayers:
    """Mean effective rank of one image's patch tokens per layer, with tokens in order and under RPI."""

    normal: list[Number]
    rpi: list[Number]  # mean over RPI draws
    max_rank: int  # min(N, D): the most it can be


def effective_rank(tokens: Any) -> Any:
    """``exp`` of the entropy of the normalised singular values of every ``(N, D)`` matrix of ``tokens (..., N, D)``:
    a tensor of shape ``(...)``, in the tokens' dtype (NaN for an all-zero matrix)."""
    import torch

    sigma = torch.linalg.svdvals(tokens)  # (..., k), descending, >= 0
    p = sigma / sigma.sum(dim=-1, keepdim=True)
    return torch.exp(-torch.special.xlogy(p, p).sum(dim=-1))


class _Mean:
    """The running sum and count per layer of the images' effective ranks."""

    def __init__(self) -> None:
        self.total: Any = None  # (L,) float64
        self.count: Any = None  # (L,) int64
        self.max_rank = 0  # min(N, D) of the tokens seen

    def add(self, values: Any) -> None:  # (B, L)
        import torch

        valid = torch.isfinite(values)
        total = torch.where(valid, values, torch.zeros_like(values)).sum(dim=0).to(torch.float64)
        count = valid.sum(dim=0)
        self.total = total if self.total is None else self.total + total
        self.count = count if self.count is None else self.count + count

    def compute(self) -> Any:  # (L,) float64 on the CPU; NaN for a layer without an image
        if self.total is None:
            raise ValueError("the effective rank needs at least one batch")
        return (self.total / self.count).cpu()


@register_lens
class EffectiveRankLens(Lens):
    name = "effective_rank"
    title = "effective rank"
    description = ("the effective rank, the exponential of the entropy of the normalised singular values of one "
                   "image's patch tokens (mean over images), i.e. how many directions the tokens of an image spread "
                   "over")  # fmt: skip
    record_type = EffectiveRankLayers
    ylabel = "effective rank (mean over images)"
    stat = "mean"
    stat_label = "eff. rank"
    table_note = "eff. rank: mean over layers"
    order = 30
    zero_line = False

    def accumulator(self) -> _Mean:
        return _Mean()

    def update(self, state: _Mean, batch: LensBatch) -> None:
        import torch

        tokens = batch.tokens
        dtype = torch.float64 if tokens.dtype == torch.float64 or tokens.device.type == "cpu" else torch.float32
        state.add(effective_rank(tokens.to(dtype)))  # (B, L)
        state.max_rank = min(tokens.shape[-2], tokens.shape[-1])

    def record(self, normal: _Mean, rpi: Sequence[_Mean]) -> EffectiveRankLayers:
        return EffectiveRankLayers(normal=normal.compute().tolist(), rpi=mean_over_draws([r.compute() for r in rpi]),
                                   max_rank=normal.max_rank)  # fmt: skip

    @classmethod
    def layers(cls, record: EffectiveRankLayers, mode: str) -> list[float]:
        return list(getattr(record, mode))

    @classmethod
    def sentences(cls, means: Mapping[str, Mapping[str, Mapping[str, float]]], reference: float | None,
                  fmt: Callable[..., str]) -> list[str]:  # fmt: skip
        rpi = sorted(means.get(cls.name, {}).get("rpi", {}).items(), key=lambda p: p[1])
        if len(rpi) < 2:
            return []
        return [(f"Under RPI, the mean effective rank over layers ranges from {fmt(rpi[0][1], 1)} (`{rpi[0][0]}`) to "
                 f"{fmt(rpi[-1][1], 1)} (`{rpi[-1][0]}`).")]
