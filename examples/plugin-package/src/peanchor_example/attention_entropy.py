"""``attention_entropy``: the mean entropy of the attention distributions per layer, in nats.

For one head and one query token, ``H = -Σ_k p_k log p_k`` over the keys (every token, prefix included;
``0 log 0 = 0``): 0 for attention on one key, ``log T`` for attention spread evenly over all ``T`` tokens. The
lens reports its mean over heads, the chosen queries and the evaluation images, per layer, with tokens in order and
under RPI (the mean over RPI draws). Its option ``queries`` chooses the query tokens: ``"patches"`` (the default),
``"prefix"`` (CLS and registers) or ``"all"``; set it with ``--set analysis.lenses.attention_entropy.queries=all``
or ``peanchor.analyze(..., lens_options={"attention_entropy": {"queries": "all"}})``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from peanchor.core.fileio import Number
from peanchor.lenses import LENSES, Lens, LensBatch, LensContext
from peanchor.lenses.base import mean_over_draws

__all__ = ["AttentionEntropyLayers", "AttentionEntropyLens", "AttentionEntropyOptions", "EntropyAccumulator"]


@dataclass(frozen=True)
class AttentionEntropyOptions:
    queries: Literal["patches", "prefix", "all"] = "patches"  # whose attention distributions are averaged


@dataclass(kw_only=True)
class AttentionEntropyLayers:
    """Mean attention entropy per layer (nats), with tokens in order and under RPI."""

    normal: list[Number]
    rpi: list[Number]  # mean over RPI draws
    queries: str  # the option it was measured with
    uniform: Number  # log T: attention spread evenly over every token


class EntropyAccumulator:
    """The running sum and count of attention entropies per layer: ``update(layer, weights)``, ``compute()``,
    ``reset()`` and ``merge(other)`` (shards of one pass), in the torchmetrics style."""

    def __init__(self, depth: int, num_prefix: int, queries: str) -> None:
        self.depth, self.num_prefix, self.queries = depth, num_prefix, queries
        self.reset()

    def reset(self) -> None:
        self.total = [0.0] * self.depth
        self.count = [0] * self.depth
        self.tokens = 0  # T, the keys of the weights seen

    def update(self, layer: int, weights: Any) -> None:  # (b, H, T, T), rows sum to 1
        import torch

        rows = {"patches": slice(self.num_prefix, None), "prefix": slice(0, self.num_prefix), "all": slice(None)}
        p = weights[:, :, rows[self.queries]].to(torch.float64)  # (b, H, Q, T)
        entropy = -torch.special.xlogy(p, p).sum(dim=-1)  # (b, H, Q)
        self.total[layer] += float(entropy.sum())
        self.count[layer] += entropy.numel()
        self.tokens = weights.shape[-1]

    def merge(self, other: EntropyAccumulator) -> None:
        self.total = [a + b for a, b in zip(self.total, other.total, strict=True)]
        self.count = [a + b for a, b in zip(self.count, other.count, strict=True)]
        self.tokens = self.tokens or other.tokens

    def compute(self) -> Any:  # (L,) float64; NaN for a layer without weights
        import torch

        return torch.tensor([t / n if n else math.nan for t, n in zip(self.total, self.count, strict=True)],
                            dtype=torch.float64)  # fmt: skip


@LENSES.register
class AttentionEntropyLens(Lens):
    name = "attention_entropy"
    title = "attention entropy"
    description = ("the mean attention entropy, how evenly each head spreads a query's attention over the tokens "
                   "(nats; log T is attention spread evenly)")  # fmt: skip
    record_type = AttentionEntropyLayers
    ylabel = "mean entropy (nats)"
    stat = "mean"
    stat_label = "attn. entropy"
    table_note = "attn. entropy: nats, mean over layers"
    order = 40
    reads_attention = True
    zero_line = False
    reference_label = "uniform attention"
    options_type = AttentionEntropyOptions
    options: AttentionEntropyOptions

    @classmethod
    def applies(cls, context: LensContext) -> bool:
        return context.has_attention_weights

    def accumulator(self) -> EntropyAccumulator:
        if self.options.queries == "prefix" and self.context.num_prefix == 0:
            raise ValueError("attention_entropy: queries=prefix needs a model with a CLS or register token")
        return EntropyAccumulator(self.context.depth, self.context.num_prefix, self.options.queries)

    def update(self, state: EntropyAccumulator, batch: LensBatch) -> None:
        pass  # everything comes from the attention weights, during the forward

    def attend(self, state: EntropyAccumulator, block: int, weights: Any) -> None:
        state.update(block, weights)

    def record(self, normal: EntropyAccumulator, rpi: Sequence[EntropyAccumulator]) -> AttentionEntropyLayers:
        return AttentionEntropyLayers(normal=normal.compute().tolist(), rpi=mean_over_draws([r.compute() for r in rpi]),
                                      queries=self.options.queries, uniform=math.log(normal.tokens))  # fmt: skip

    @classmethod
    def layers(cls, record: AttentionEntropyLayers, mode: str) -> list[float]:
        return list(getattr(record, mode))

    @classmethod
    def reference(cls, record: AttentionEntropyLayers) -> float | None:
        return record.uniform
