"""Effective rank per layer: how many directions one image's patch tokens spread over.

For one image and layer, with ``σ_1 ... σ_k`` the singular values of its patch tokens ``X (N, D)`` (the SSDC probe
point, ``k = min(N, D)``), ``p_i = σ_i / Σ_j σ_j`` and the entropy ``H = -Σ_i p_i log p_i`` (``0 log 0 = 0``), the
effective rank is ``exp(H)`` (Roy & Vetterli, 2007): 1 for tokens that all lie on one line, ``k`` for singular values
that are all equal. The lens reports its mean over the evaluation images, per layer, with tokens in order and under
RPI (one permutation per forward call, as SSDC; the mean over RPI draws). An image whose tokens are all zero has no
effective rank and is left out of its layer's mean.

The math, and the mean over images, are :mod:`peanchor.metrics.effective_rank`'s, as every lens's is in
:mod:`peanchor.metrics`.

Imports: :mod:`peanchor.lenses` (base, registry), :mod:`peanchor.core.fileio`; :mod:`peanchor.metrics` when measuring.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peanchor.core.fileio import Number
from peanchor.lenses.base import Lens, LensBatch, mean_over_draws
from peanchor.lenses.registry import LENSES

__all__ = ["EffectiveRankLayers", "EffectiveRankLens", "effective_rank"]


def effective_rank(tokens: Any) -> Any:
    """:func:`peanchor.metrics.effective_rank.effective_rank`, the lens's math (imported with torch on first use)."""
    from peanchor.metrics.effective_rank import effective_rank as of

    return of(tokens)


@dataclass(kw_only=True)
class EffectiveRankLayers:
    """Mean effective rank of one image's patch tokens per layer, with tokens in order and under RPI."""

    normal: list[Number]
    rpi: list[Number]  # mean over RPI draws
    max_rank: int  # min(N, D): the most it can be


@LENSES.register
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

    def accumulator(self) -> Any:  # peanchor.metrics.effective_rank.EffectiveRankAccumulator
        from peanchor.metrics.effective_rank import EffectiveRankAccumulator

        return EffectiveRankAccumulator()

    def update(self, state: Any, batch: LensBatch) -> None:
        state.update(batch.tokens)

    def record(self, normal: Any, rpi: Sequence[Any]) -> EffectiveRankLayers:
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
