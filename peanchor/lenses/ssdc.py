"""SSDC per layer (the paper's lens): the Spearman correlation between the tokens' mean cosine similarity and their
grid distance, negated, of the patch tokens each block's attention sees (layer 0: patch embeddings + PE).

Under RPI each pass draws one permutation per forward call, shared by the batch, so that the mean similarity
matrix is taken over tokens that sit in the same slots; the record keeps the mean over RPI draws, their sample
std and, with several draws, every draw. With ``bootstrap`` replicates it also keeps per-layer confidence intervals
over images (under RPI, of the first draw). ΔSSDC and the α sweep read it through :meth:`Lens.curve` (it is
measured in the truncated passes too: ``truncated``).

Imports: :mod:`peanchor.lenses` (base, registry), :mod:`peanchor.fileio`; :mod:`peanchor.metrics` and numpy when
measuring.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from peanchor.fileio import Number
from peanchor.lenses.base import Lens, LensBatch, Row, mean_and_std, plan_option
from peanchor.lenses.registry import register_lens

__all__ = ["CI_LEVEL", "SSDCLayers", "SSDCLens", "SSDCOptions", "mean_and_std"]

CI_LEVEL = 0.95
_OMIT = {"omit_if_none": True}  # an optional part that was not measured is absent from the file, not null


@dataclass(kw_only=True)
class SSDCLayers:
    """SSDC per layer (layer 0 = LN1 of patch embeddings + PE), with tokens in order and under RPI."""

    normal: list[Number]
    rpi: list[Number]  # mean over RPI draws
    rpi_std: list[Number]  # sample std over RPI draws (0 with one draw)
    rpi_draws: list[list[Number]] | None = field(default=None, metadata=_OMIT)  # (draws, layers), with > 1 draw
    normal_ci: list[list[Number]] | None = field(default=None, metadata=_OMIT)  # [[low per layer], [high per layer]]
    rpi_ci: list[list[Number]] | None = field(default=None, metadata=_OMIT)  # the same under RPI, of the first draw
    ci_level: float | None = field(default=None, metadata=_OMIT)
    rpi_permutations: int | None = field(default=None, metadata=_OMIT)  # permutations behind each RPI value

    def max_rpi(self) -> float | None:
        """The highest finite SSDC over layers under RPI."""
        values = [v for v in self.rpi if math.isfinite(v)]
        return max(values) if values else None


def _floats(values: Any) -> list[float]:
    return [float(v) for v in (values.tolist() if hasattr(values, "tolist") else values)]


@dataclass(frozen=True)
class SSDCOptions:
    """How SSDC is measured (``--set analysis.lenses.ssdc.<option>=...``; the plan also keeps them as
    ``analysis.ssdc_mode``, ``analysis.metric`` and ``analysis.bootstrap``, the names its files record)."""

    mode: Literal["mean_similarity", "per_image"] = plan_option("mean_similarity", "ssdc_mode")  # Spearman of
    # the mean similarity matrix, or the mean of each image's Spearman
    metric: Literal["manhattan", "euclidean"] = plan_option("manhattan", "metric")  # the grid distance
    bootstrap: int = plan_option(0, "bootstrap")  # replicates for per-layer confidence intervals (0: none)


@register_lens
class SSDCLens(Lens):
    name = "ssdc"
    title = "SSDC"
    description = ("SSDC, how strongly the tokens' similarity falls off with their distance on the grid (the "
                   "paper's measure)")  # fmt: skip
    record_type = SSDCLayers
    ylabel = "SSDC"
    stat = "max"
    stat_label = "max SSDC"
    order = 0
    required = True
    truncated = True  # ΔSSDC at each α of the sweep reads layers 0 and 1 under RPI
    options_type = SSDCOptions
    options: SSDCOptions

    def accumulator(self) -> Any:  # peanchor.metrics.SSDCAccumulator
        from peanchor.metrics import SSDCAccumulator

        o = self.options
        return SSDCAccumulator(self.context.grid, metric=o.metric, mode=o.mode, bootstrap=o.bootstrap,
                               seed=self.context.seed)  # fmt: skip

    def update(self, state: Any, batch: LensBatch) -> None:
        state.update(batch.tokens)

    def curve(self, state: Any) -> list[float]:
        return _floats(state.compute())

    def record(self, normal: Any, rpi: Sequence[Any]) -> SSDCLayers:
        draws = [self.curve(acc) for acc in rpi]
        mean, std = mean_and_std(draws)
        record = SSDCLayers(normal=self.curve(normal), rpi=mean, rpi_std=std,
                            rpi_draws=draws if len(draws) > 1 else None)  # fmt: skip
        if self.options.bootstrap:
            bounds = [normal.confidence_interval(CI_LEVEL), rpi[0].confidence_interval(CI_LEVEL)]
            record.normal_ci, record.rpi_ci = ([_floats(low), _floats(high)] for low, high in bounds)
            record.ci_level = CI_LEVEL
        return record

    @classmethod
    def layers(cls, record: SSDCLayers, mode: str) -> list[float]:
        return list(getattr(record, mode))

    @classmethod
    def rows(cls, record: SSDCLayers) -> Iterator[Row]:
        for key in ("normal", "rpi", "rpi_std"):
            for layer, v in enumerate(getattr(record, key)):
                yield Row(f"ssdc_{key}", v, layer)
        for key in ("normal_ci", "rpi_ci"):
            for bound, values in zip(("low", "high"), getattr(record, key) or []):
                for layer, v in enumerate(values):
                    yield Row(f"ssdc_{key}_{bound}", v, layer)
