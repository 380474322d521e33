"""SSDC per layer (the paper's lens): the Spearman correlation between the tokens' mean cosine similarity and their
grid distance, negated, of the patch tokens each block's attention sees (layer 0: patch embeddings + PE).

Under RPI the mean similarity matrix is taken over the slots, whatever content each image's permutation put there:
by default every image has a permutation of its own (``rpi_mode`` ``"per_image"``), with ``"per_call"`` (the
paper's) one per forward call is shared by the batch. The record keeps the mean over RPI draws, their sample std,
with several draws every draw, and how many distinct permutations stand behind the RPI numbers
(``rpi_permutations``). With ``bootstrap`` replicates (:mod:`peanchor.metrics.bootstrap`: the analysis's one
resampling of groups of images) it keeps per-layer percentile intervals, in order and under RPI (there each
replicate is the mean over the draws, so the interval covers images and permutations). ΔSSDC and the α sweep read
it through :meth:`Lens.curve` and :meth:`SSDCLens.replicates` (it is measured in the truncated passes too:
``truncated``).

Imports: :mod:`peanchor.lenses` (base, registry), :mod:`peanchor.core.fileio`; :mod:`peanchor.metrics` and numpy when
measuring.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from peanchor.core.fileio import Number
from peanchor.lenses.base import MODE_LABELS, MODES, Lens, LensBatch, Row, layer_value, mean_and_std, plan_option
from peanchor.lenses.registry import LENSES

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
    rpi_ci: list[list[Number]] | None = field(default=None, metadata=_OMIT)  # the same under RPI (images and draws)
    ci_level: float | None = field(default=None, metadata=_OMIT)
    rpi_permutations: int | None = field(default=None, metadata=_OMIT)  # distinct permutations behind ``rpi``

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
    bootstrap: int = plan_option(200, "bootstrap")  # replicates of the groups bootstrap (0: no intervals); a test keeps
    # it equal to peanchor.metrics.bootstrap.DEFAULT_REPLICATES


@LENSES.register
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
        return SSDCAccumulator(self.context.grid, metric=o.metric, mode=o.mode, groups=self.context.groups)

    def update(self, state: Any, batch: LensBatch) -> None:
        import torch

        state.update(batch.tokens, torch.arange(batch.start, batch.start + batch.tokens.shape[0]))

    def curve(self, state: Any) -> list[float]:
        return _floats(state.compute())

    def replicates(self, states: Sequence[Any]) -> Any:  # torch.Tensor (R, L) | None
        """The bootstrap replicates ``(R, L)`` of the mean over ``states`` (one pass, or the RPI draws) of the
        per-layer SSDC, on the analysis's shared resampling; None without a bootstrap. Memoised per state: ΔSSDC and
        the record read the same replicates."""
        import torch

        boot = self.context.bootstrap
        if boot is None:
            return None
        memo: dict[int, Any] = self.__dict__.setdefault("_replicates", {})
        for state in states:
            if id(state) not in memo:
                memo[id(state)] = (state, state.replicates(boot.counts))  # the state kept: its id stays its own
        return torch.stack([memo[id(state)][1] for state in states]).mean(dim=0)  # (R, L)

    def permutations(self, draws: int) -> int:
        """How many distinct permutations stand behind an RPI number of ``draws`` draws."""
        per_draw = self.context.num_images
        if self.context.rpi_mode == "per_call":
            batch = int(self.context.settings.get("batch_size") or per_draw)
            per_draw = -(-per_draw // batch)
        return draws * per_draw

    def record(self, normal: Any, rpi: Sequence[Any]) -> SSDCLayers:
        draws = [self.curve(acc) for acc in rpi]
        mean, std = mean_and_std(draws)
        record = SSDCLayers(normal=self.curve(normal), rpi=mean, rpi_std=std,
                            rpi_draws=draws if len(draws) > 1 else None,
                            rpi_permutations=self.permutations(len(rpi)))  # fmt: skip
        boot = self.context.bootstrap
        if boot is not None:
            record.normal_ci = boot.layer_intervals(self.replicates([normal]))
            record.rpi_ci = boot.layer_intervals(self.replicates(rpi)) if rpi else None
            record.ci_level = boot.level
        return record

    @classmethod
    def layers(cls, record: SSDCLayers, mode: str) -> list[float]:
        return list(getattr(record, mode))

    @classmethod
    def summary_lines(cls, record: SSDCLayers) -> list[str]:
        """The per-layer values, normal and under RPI, each with its interval where the analysis had a bootstrap."""
        lines = []
        for mode in MODES:
            values, bounds = getattr(record, mode), getattr(record, f"{mode}_ci")
            shown = [layer_value(v) + (f" [{layer_value(lo)}, {layer_value(hi)}]" if bounds else "")
                     for v, lo, hi in zip(values, *(bounds or (values, values)))]  # fmt: skip
            lines.append(f"  {cls.title} {MODE_LABELS[mode]} " + "  ".join(shown))
        if record.rpi_permutations is not None:
            lines.append(f"  (RPI: {record.rpi_permutations} distinct permutations"
                         + (f"; intervals {record.ci_level:.0%}, bootstrap over groups of images)" if record.ci_level
                            else ")"))  # fmt: skip
        return lines

    @classmethod
    def rows(cls, record: SSDCLayers) -> Iterator[Row]:
        for key in ("normal", "rpi", "rpi_std"):
            for layer, v in enumerate(getattr(record, key)):
                yield Row(f"ssdc_{key}", v, layer)
        for key in ("normal_ci", "rpi_ci"):
            for bound, values in zip(("low", "high"), getattr(record, key) or []):
                for layer, v in enumerate(values):
                    yield Row(f"ssdc_{key}_{bound}", v, layer)
