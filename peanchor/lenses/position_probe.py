"""The position-decoding probe per layer (docs/lenses.md): the held-out R² of a ridge regression from a layer's
patch tokens (the SSDC probe point) to their slot's grid row and column, i.e. how much absolute position the layer
carries linearly. It is fitted on a split of the evaluation images drawn with the plan's ``seed`` (the same split in
every pass; ``probe_holdout`` of them are scored) with ridge λ ``probe_ridge`` relative to the mean feature
variance.

Under RPI it needs one permutation per *image*: with a permutation shared by a batch, a probe fitted on some of its
images could learn "content from position π(s) ⇒ slot s" and score it on the others (content carries position in any
image with a layout); with one per image there is nothing shared to learn, and the probe reads only what the slots
carry. The default RPI (``rpi_mode`` ``"per_image"``) gives it that in the draw's own pass; under ``"per_call"`` it is
fed from a pass of its own. It needs at least two images to split.

With the analysis's bootstrap the record has per-layer intervals (``row_ci``, ``col_ci`` and ``r2_ci``, the last of
the mean of row and column): the probe fitted once, its held-out score resampled over the groups of images (under
RPI, averaged over the draws replicate by replicate).

Imports: :mod:`peanchor.lenses` (base, registry); :mod:`peanchor.metrics` when measuring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from peanchor.lenses.base import (
    MODE_LABELS,
    MODES,
    LayerIntervals,
    LayerPair,
    Lens,
    LensBatch,
    LensContext,
    Row,
    layer_value,
    mean_over_draws,
    plan_option,
)
from peanchor.lenses.registry import LENSES

__all__ = ["PositionProbeLayers", "PositionProbeLens", "PositionProbeOptions"]

_OMIT = {"omit_if_none": True}  # an optional part that was not measured is absent from the file, not null


@dataclass(frozen=True)
class PositionProbeOptions:
    """The probe's settings (``--set analysis.lenses.position_probe.<option>=...``; the plan also keeps them as
    ``analysis.probe_ridge`` and ``analysis.probe_holdout``). The defaults are
    :mod:`peanchor.metrics.position_probe`'s (a test keeps them equal)."""

    ridge: float = plan_option(1e-3, "probe_ridge")  # λ relative to the mean feature variance
    holdout: float = plan_option(0.5, "probe_holdout")  # the fraction of the images the probe is scored on


@dataclass(kw_only=True)
class PositionProbeLayers:
    """Held-out R² per layer of a ridge probe from the layer's patch tokens (the SSDC probe point) to their
    slot's grid row and column, fitted on ``fit_images`` and scored on the other ``heldout_images``."""

    row: LayerPair
    col: LayerPair
    fit_images: int
    heldout_images: int
    # intervals of the groups bootstrap: the probe fitted once, its held-out score resampled (absent in older files)
    row_ci: LayerIntervals | None = field(default=None, metadata=_OMIT)
    col_ci: LayerIntervals | None = field(default=None, metadata=_OMIT)
    r2_ci: LayerIntervals | None = field(default=None, metadata=_OMIT)  # of the mean of row and col (the curve)
    ci_level: float | None = field(default=None, metadata=_OMIT)


@LENSES.register
class PositionProbeLens(Lens):
    name = "position_probe"
    title = "probe R²"
    description = ("the position probe, a ridge regression from a layer's patch tokens to their grid row and "
                   "column, fitted on part of the evaluation images and scored (R², the mean of row and column) on "
                   "the rest, i.e. how much absolute position a layer carries linearly; it falls to about 0 under "
                   "RPI for structure carried by content")  # fmt: skip
    record_type = PositionProbeLayers
    ylabel = "held-out R² (row, col mean)"
    stat = "max"
    stat_label = "max probe R²"
    table_note = "probe R²: held-out, mean of row and column"
    order = 10
    rpi = "per_image"
    options_type = PositionProbeOptions
    options: PositionProbeOptions

    def __init__(self, context: LensContext, options: PositionProbeOptions | None = None) -> None:
        from peanchor.metrics.position_probe import heldout_mask

        super().__init__(context, options)
        self.ridge = float(self.options.ridge)
        self.heldout = heldout_mask(context.num_images, self.options.holdout, context.seed)

    @classmethod
    def applies(cls, context: LensContext) -> bool:
        return context.num_images >= 2

    def accumulator(self) -> Any:  # peanchor.metrics.position_probe.PositionProbeAccumulator
        from peanchor.metrics.position_probe import PositionProbeAccumulator

        return PositionProbeAccumulator(self.context.grid, self.ridge, groups=self.context.groups)

    def update(self, state: Any, batch: LensBatch) -> None:
        import torch

        end = batch.start + batch.tokens.shape[0]
        state.update(batch.tokens, self.heldout[batch.start : end], torch.arange(batch.start, end))

    def record(self, normal: Any, rpi: Sequence[Any]) -> PositionProbeLayers:
        n, r = normal.compute(), [p.compute() for p in rpi]  # (L, 2) each: row, col
        fallbacks = sorted({a.solver for a in (normal, *rpi)} - {"cholesky"})
        if fallbacks:  # a ridge system that Cholesky could not factor (not numerically positive definite)
            self.notes.append(f"the ridge solve fell back from Cholesky to {' and '.join(fallbacks)}")
        fit, held = normal.num_images
        record = PositionProbeLayers(
            row=LayerPair(normal=n[:, 0].tolist(), rpi=mean_over_draws([v[:, 0] for v in r])),
            col=LayerPair(normal=n[:, 1].tolist(), rpi=mean_over_draws([v[:, 1] for v in r])),
            fit_images=fit, heldout_images=held,
        )  # fmt: skip
        boot = self.context.bootstrap
        if boot is not None and rpi:
            import torch

            normal_reps = normal.replicates(boot.counts)  # (R, L, 2)
            rpi_reps = torch.stack([p.replicates(boot.counts) for p in rpi]).mean(dim=0)  # (R, L, 2): draws averaged

            def intervals(pick: Any) -> LayerIntervals:
                return LayerIntervals(normal=boot.layer_intervals(pick(normal_reps)),
                                      rpi=boot.layer_intervals(pick(rpi_reps)))  # fmt: skip

            record.row_ci, record.col_ci = intervals(lambda t: t[..., 0]), intervals(lambda t: t[..., 1])
            record.r2_ci, record.ci_level = intervals(lambda t: t.mean(dim=-1)), boot.level
        return record

    @classmethod
    def layers(cls, record: PositionProbeLayers, mode: str) -> list[float]:
        """The mean of the row and column R² per layer."""
        return [(a + b) / 2 for a, b in zip(getattr(record.row, mode), getattr(record.col, mode))]

    @classmethod
    def rows(cls, record: PositionProbeLayers) -> Iterator[Row]:
        for target in ("row", "col"):
            for mode in MODES:
                for layer, v in enumerate(getattr(getattr(record, target), mode)):
                    yield Row(f"probe_r2_{target}_{mode}", v, layer)
        for target in ("row", "col", "r2"):  # the intervals, where the analysis had a bootstrap
            intervals = getattr(record, f"{target}_ci")
            name = "probe_r2" if target == "r2" else f"probe_r2_{target}"
            for mode in MODES if intervals is not None else ():
                for bound, values in zip(("low", "high"), getattr(intervals, mode)):
                    for layer, v in enumerate(values):
                        yield Row(f"{name}_{mode}_ci_{bound}", v, layer)

    @classmethod
    def scalars(cls, record: PositionProbeLayers) -> Iterator[tuple[str, Any, int]]:
        for mode in MODES:
            for target in ("row", "col"):
                for layer, value in enumerate(getattr(getattr(record, target), mode)):
                    yield f"probe_r2/{target}/{mode}", value, layer

    @classmethod
    def summary_lines(cls, record: PositionProbeLayers) -> list[str]:
        total = record.fit_images + record.heldout_images
        lines = [f"  probe R² {MODE_LABELS[mode]} " + " ".join(f"{layer_value(a)}/{layer_value(b)}" for a, b in
                                                              zip(getattr(record.row, mode), getattr(record.col, mode)))
                 + f"  (row/col, held out: {record.heldout_images} of {total} images)" for mode in MODES]  # fmt: skip
        if record.r2_ci is not None:
            for mode in MODES:
                low, high = getattr(record.r2_ci, mode)
                lines.append(f"  probe R² {MODE_LABELS[mode]} mean of row/col, {record.ci_level:.0%} interval: "
                             + " ".join(f"[{layer_value(a)}, {layer_value(b)}]" for a, b in zip(low, high)))  # fmt: skip
        return lines

    @classmethod
    def sentences(cls, means: Mapping[str, Mapping[str, Mapping[str, float]]], reference: float | None,
                  fmt: Callable[..., str]) -> list[str]:  # fmt: skip
        own = means.get(cls.name, {})
        normal, rpi = own.get("normal", {}), own.get("rpi", {})
        out = []
        probe = sorted(rpi.items(), key=lambda p: p[1])
        if len(probe) >= 2:
            out.append(f"Under RPI, the highest probe R² over layers ranges from {fmt(probe[0][1])} (`{probe[0][0]}`) "
                       f"to {fmt(probe[-1][1])} (`{probe[-1][0]}`).")  # fmt: skip
        kept = sorted(((c, normal[c] - rpi[c]) for c in normal if c in rpi), key=lambda p: p[1])
        if len(kept) >= 2:
            out.append(f"RPI lowers the highest probe R² least for `{kept[0][0]}` (by {fmt(kept[0][1])}) and most for "
                       f"`{kept[-1][0]}` (by {fmt(kept[-1][1])}).")  # fmt: skip
        ssdc = means.get("ssdc", {}).get("rpi", {})
        shared = [c for c in ssdc if c in rpi]
        pairs = [(a, b) for i, a in enumerate(shared) for b in shared[i + 1 :]]
        if pairs:
            agree = sum((ssdc[a] - ssdc[b]) * (rpi[a] - rpi[b]) > 0 for a, b in pairs)
            out.append(f"Under RPI, max SSDC and max probe R² order {agree} of {len(pairs)} pairs of conditions the "
                       "same way.")  # fmt: skip
        return out
