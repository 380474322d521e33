"""The mean attention distance per layer and head (docs/lenses.md): over query patches and images, the
attention-weighted distance on the slot grid from each query patch to the patch keys (prefix tokens excluded as
queries, and as keys with the patch weights renormalised), Manhattan and Euclidean, in patches; with the weight the
patch queries give the prefix tokens, and the distance of attention spread evenly over the patches for reference.

It reads every block's attention weights as the model hands them out during a pass, so it is measured only for
models that can (``has_attention_weights``), reduced block by block instead of keeping ``(B, L, H, T, T)``.

Imports: :mod:`peanchor.lenses` (base, registry), :mod:`peanchor.core.fileio`; :mod:`peanchor.metrics` when measuring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from peanchor.core.fileio import Number
from peanchor.lenses.base import (
    MODES,
    HeadLayers,
    Lens,
    LensBatch,
    LensContext,
    Row,
    mean_over_draws,
)
from peanchor.lenses.registry import LENSES

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

__all__ = ["AttentionDistanceLayers", "AttentionDistanceLens"]

_KEYS = ("manhattan", "euclidean", "prefix_mass")


@dataclass(kw_only=True)
class AttentionDistanceLayers:
    """Mean attention distance per layer and head, in patches on the slot grid: over query patches and images, the
    attention-weighted distance to the patch keys (prefix tokens excluded as queries, and as keys with the patch
    weights renormalised), Manhattan and Euclidean."""

    manhattan: HeadLayers
    euclidean: HeadLayers
    prefix_mass: HeadLayers  # mean weight the patch queries give the prefix tokens (CLS, registers)
    uniform: dict[str, Number]  # metric → the distance of attention spread evenly over the patches


@LENSES.register
class AttentionDistanceLens(Lens):
    name = "attention_distance"
    title = "attention distance"
    description = ("the mean attention distance, the attention-weighted grid distance (Manhattan, in patches) from "
                   "each query patch to the patch keys, i.e. how local each head attends; structure carried by "
                   "content stops being local on the slot grid under RPI")  # fmt: skip
    record_type = AttentionDistanceLayers
    ylabel = "mean over heads (patches)"
    stat = "mean"
    stat_label = "attn. distance"
    table_note = "attn. distance: Manhattan, in patches, mean over layers and heads"
    order = 20
    reads_attention = True
    zero_line = False
    reference_label = "uniform attention"

    @classmethod
    def applies(cls, context: LensContext) -> bool:
        return context.has_attention_weights

    def accumulator(self) -> Any:  # peanchor.metrics.attention_distance.AttentionDistanceAccumulator
        from peanchor.metrics.attention_distance import AttentionDistanceAccumulator

        return AttentionDistanceAccumulator(self.context.grid, self.context.num_prefix)

    def update(self, state: Any, batch: LensBatch) -> None:
        pass  # everything comes from the attention weights, during the forward

    def attend(self, state: Any, block: int, weights: Tensor) -> None:
        state.update(block, weights)

    def record(self, normal: Any, rpi: Sequence[Any]) -> AttentionDistanceLayers:
        from peanchor.metrics.attention_distance import (
            METRICS,
            uniform_attention_distance,
        )

        n, r = normal.compute(), [a.compute() for a in rpi]

        def per_head(key: str) -> HeadLayers:
            return HeadLayers(normal=n[key].tolist(), rpi=mean_over_draws([d[key] for d in r]))

        return AttentionDistanceLayers(
            manhattan=per_head("manhattan"), euclidean=per_head("euclidean"), prefix_mass=per_head("prefix_mass"),
            uniform={m: uniform_attention_distance(self.context.grid, m) for m in METRICS},  # type: ignore[arg-type]
        )  # fmt: skip

    @classmethod
    def layers(cls, record: AttentionDistanceLayers, mode: str) -> list[float]:
        return record.manhattan.layer_means(mode)

    @classmethod
    def reference(cls, record: AttentionDistanceLayers) -> float | None:
        return record.uniform.get("manhattan")

    @classmethod
    def rows(cls, record: AttentionDistanceLayers) -> Iterator[Row]:
        for key in _KEYS:
            name = "attention_prefix_mass" if key == "prefix_mass" else f"attention_distance_{key}"
            for mode in MODES:
                for layer, heads in enumerate(getattr(getattr(record, key), mode)):
                    for head, v in enumerate(heads):
                        yield Row(f"{name}_{mode}", v, layer, head)
        for metric, v in record.uniform.items():
            yield Row(f"attention_distance_{metric}_uniform", v)

    @classmethod
    def summary_lines(cls, record: AttentionDistanceLayers) -> list[str]:
        uniform = record.uniform.get("manhattan")
        return [line + f"  (mean over heads, Manhattan, in patches; uniform {uniform:.2f})"
                for line in super().summary_lines(record)]  # fmt: skip

    @classmethod
    def sentences(cls, means: Mapping[str, Mapping[str, Mapping[str, float]]], reference: float | None,
                  fmt: Callable[..., str]) -> list[str]:  # fmt: skip
        distance = sorted(means.get(cls.name, {}).get("rpi", {}).items(), key=lambda p: p[1])
        uniform = reference
        if len(distance) < 2 or uniform is None:
            return []
        (low, low_value), (high, high_value) = distance[0], distance[-1]
        return [(f"Under RPI, the mean attention distance ranges from {fmt(low_value, 2)} (`{low}`) to "
                 f"{fmt(high_value, 2)} (`{high}`); attention spread evenly over the patches has {fmt(uniform, 2)}.")]
