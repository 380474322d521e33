"""The two lenses beside SSDC, planned for a model and an evaluation set, and their per-layer records.

A full probed pass (clean, and each RPI draw, at α = 1) feeds three accumulators from the same forward: SSDC
(:class:`~peanchor.metrics.SSDCAccumulator`), the mean attention distance per layer and head
(:class:`~peanchor.metrics.attention_distance.AttentionDistanceAccumulator`, fed block by block as the model
hands out its attention weights) and the position-decoding probe
(:class:`~peanchor.metrics.position_probe.PositionProbeAccumulator`, on the same tokens as SSDC). Under RPI the
positions of all three are the slots, so the lenses ask the same question of the same passes.

:class:`LensPlan` says what a model and an evaluation set allow (attention weights only where the model hands
them out; a probe only with at least two images to split), builds the accumulators of one pass, and turns the
accumulators of the normal pass and the RPI draws into the records of :mod:`peanchor.results`.

Imports: torch; :mod:`peanchor.metrics`, :mod:`peanchor.results`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from peanchor.metrics.attention_distance import METRICS, AttentionDistanceAccumulator, uniform_attention_distance
from peanchor.metrics.position_probe import PositionProbeAccumulator, heldout_mask
from peanchor.results import AttentionDistanceLayers, HeadLayers, LayerPair, PositionProbeLayers

__all__ = ["LensPlan"]


def _mean(tensors: Sequence[Tensor]) -> list:
    """The mean of equally shaped tensors, as nested lists of floats (the mean over RPI draws)."""
    return torch.stack(list(tensors)).mean(dim=0).tolist()


@dataclass(frozen=True)
class LensPlan:
    """What the lenses need to know, once per analysis."""

    grid: tuple[int, int]
    num_prefix: int
    attention: bool  # whether the model hands out its attention weights
    heldout: Tensor | None  # (num_images,) bool: the images the probe is scored on; None: no probe
    ridge: float

    @classmethod
    def for_model(cls, model: nn.Module, num_images: int, *, seed: int, ridge: float, holdout: float) -> LensPlan:
        """The plan for ``model`` on ``num_images`` images; the probe's split is drawn with ``seed``."""
        return cls(
            grid=tuple(int(g) for g in model.grid),  # type: ignore[arg-type]
            num_prefix=int(getattr(model, "num_prefix", 1)),
            attention=bool(getattr(model, "has_attention_weights", False)),
            heldout=heldout_mask(num_images, holdout, seed) if num_images >= 2 else None,
            ridge=ridge,
        )

    def attention_accumulator(self) -> AttentionDistanceAccumulator | None:
        return AttentionDistanceAccumulator(self.grid, self.num_prefix) if self.attention else None

    def position_accumulator(self) -> PositionProbeAccumulator | None:
        return PositionProbeAccumulator(self.grid, self.ridge) if self.heldout is not None else None

    def attention_layers(
        self, normal: AttentionDistanceAccumulator | None, rpi: Sequence[AttentionDistanceAccumulator | None]
    ) -> AttentionDistanceLayers | None:
        """The record of the normal pass and the RPI draws (their mean), or None without attention weights."""
        if normal is None or any(a is None for a in rpi):
            return None
        n, r = normal.compute(), [a.compute() for a in rpi if a is not None]

        def per_head(key: str) -> HeadLayers:
            return HeadLayers(normal=n[key].tolist(), rpi=_mean([d[key] for d in r]))

        return AttentionDistanceLayers(
            manhattan=per_head("manhattan"), euclidean=per_head("euclidean"), prefix_mass=per_head("prefix_mass"),
            uniform={m: uniform_attention_distance(self.grid, m) for m in METRICS},  # type: ignore[arg-type]
        )  # fmt: skip

    def probe_layers(
        self, normal: PositionProbeAccumulator | None, rpi: Sequence[PositionProbeAccumulator | None]
    ) -> PositionProbeLayers | None:
        """The record of the normal pass and the RPI draws (their mean), or None without a probe."""
        if normal is None or self.heldout is None or any(p is None for p in rpi):
            return None
        n, r = normal.compute(), [p.compute() for p in rpi if p is not None]  # (L, 2) each: row, col
        fit, held = normal.num_images
        return PositionProbeLayers(
            row=LayerPair(normal=n[:, 0].tolist(), rpi=_mean([v[:, 0] for v in r])),
            col=LayerPair(normal=n[:, 1].tolist(), rpi=_mean([v[:, 1] for v in r])),
            fit_images=fit, heldout_images=held,
        )  # fmt: skip
