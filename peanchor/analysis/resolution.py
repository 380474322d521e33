"""Top-1 at other resolutions (``analysis.resolutions``, docs/analysis.md "Other resolutions"): the model trained at
one size evaluated on the same evaluation images resized to other sizes, its positional encoding moved to the new
patch grid by its own convention.

The move is the ``pe_resample`` edit (:mod:`peanchor.interventions.kinds.pe_resample`), the one a
``--sweep pe_resample:grid=...`` uses, at its defaults for tables: an absolute table (``ape``, ``sincos``,
``fourier``, ``factorized``, the table of ``rope_ape``) is resampled bicubically, antialiased, as timm's
``resample_abs_pos_embed``; the coordinates of a rotation, a bias or a function of position move as the PE declares
(:attr:`~peanchor.pe.declaration.PEDeclaration.other_grids`): ``extrapolate`` keeps integer patch indices (RoPE,
ALiBi, LieRE, ComRoPE, STRING, RoPE + APE), ``interpolate`` maps the new grid's patch centres onto the trained span,
i.e. coordinates normalised to the image (DINOv3's RoPE). A plug-in PE declares its own; a model whose PE declares
nothing (an adapter) extrapolates. A model without a PE only takes the other grid. A model that ``pe_resample``
cannot move (PEG, the relative bias: no hook point it reaches) records its native point only, and why.

The images are resized as the dose sweep resizes them: after normalisation, bilinear, antialiased. Each size is one
pass for top-1 alone (``layers=0``, the head) under the plan's edits followed by the move, counted per group of the
analysis's bootstrap. The native size's point is the main analysis's clean pass itself (its counts, no pass of its
own), so its accuracy is the clean accuracy exactly and A(size)/A(native) is paired: both accuracies' replicates come
from the same resample of the images. A(size)/A(native) is undefined (NaN, with the reason) where the native accuracy
is not above chance by its interval, as FS is.

Imports: torch; :mod:`peanchor.analysis` (evalset, intervals, passes, plan), :mod:`peanchor.interventions`,
:mod:`peanchor.results.resolution`, :mod:`peanchor.data` (normalisation), :mod:`peanchor.core.bars`.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.intervals import Estimate, Resampler, chance_reason
from peanchor.analysis.passes import PassRunner, PassSpec
from peanchor.analysis.plan import AnalysisPlan
from peanchor.core.bars import progress_bar
from peanchor.core.errors import ConfigError
from peanchor.interventions import Edit, Intervention
from peanchor.interventions.kinds.pe_resample import PEResample
from peanchor.results.resolution import ResolutionPoint, ResolutionSweep

__all__ = ["RESIZE", "coordinates_convention", "grid_correct", "measure_resolution", "resize_images",
           "resolution_edit", "resolution_grid"]  # fmt: skip

RESIZE = "bilinear, antialiased, after normalisation"


def coordinates_convention(model: Any) -> str:
    """How ``model``'s PE moves its coordinates to another grid: what its class declares (``other_grids``), else
    ``"extrapolate"``."""
    declared = getattr(type(getattr(model, "pe", None)), "declares", None)
    return getattr(declared, "other_grids", "extrapolate")


def resolution_grid(size: int, native: int, grid: Sequence[int]) -> tuple[int, int]:
    """The patch grid of ``size`` px images for a model of ``grid`` at ``native`` px; one line where the patch does
    not divide ``size``.

    >>> resolution_grid(48, 32, (4, 4))
    (6, 6)
    """
    patch = native // int(grid[0])
    if size % patch or size < patch:
        raise ConfigError(f"analysis.resolutions: {size} px is not a positive multiple of the model's patch "
                          f"({patch} px at {native} px, a {grid[0]}x{grid[1]} grid)")  # fmt: skip
    return size // patch, size // patch


def resolution_edit(model: Any, grid: tuple[int, int]) -> PEResample:
    """The ``pe_resample`` edit to ``grid`` by the PE's own convention (tables: bicubic, antialiased)."""
    return PEResample(grid=grid, rope_positions=coordinates_convention(model))


def resize_images(x: Tensor, size: int) -> Tensor:
    """Normalised images ``(B, 3, S, S)`` at ``size`` px: ``(B, 3, size, size)`` (:data:`RESIZE`)."""
    if x.shape[-1] == size and x.shape[-2] == size:
        return x
    return F.interpolate(x, size=(size, size), mode="bilinear", antialias=True, align_corners=False)


def grid_correct(model: Any, evalset: EvalSet, size: int, *, edits: tuple[Edit, ...], mean: Sequence[float],
                 std: Sequence[float], batch_size: int, device: torch.device, groups: int,
                 bar: Any = None) -> tuple[int, Tensor]:  # fmt: skip
    """The correct answers of ``model`` on ``evalset`` resized to ``size`` px under ``edits`` and the move to that
    grid: ``(count, per group (G,))`` (group = image index mod ``groups``; one group when ``groups`` is 0)."""
    from peanchor.data import normalize

    grid = resolution_grid(size, evalset.img_size, model.grid)
    iv = Intervention(None, 1.0, (*edits, resolution_edit(model, grid)))
    labels = evalset.labels.to(device)
    by_group = torch.zeros(max(groups, 1), dtype=torch.int64, device=device)  # (G,)
    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if device.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), autocast:
        for start in range(0, len(evalset), batch_size):
            batch = evalset.images[start : start + batch_size].to(device, non_blocking=True)  # (B, 3, S, S) uint8
            x = resize_images(normalize(batch, tuple(mean), tuple(std)), size)  # (B, 3, size, size)
            logits = model.forward_intermediates(x, iv, layers=0, head=True).logits  # (B, C)
            hits = (logits.argmax(dim=-1) == labels[start : start + x.shape[0]]).to(torch.int64)  # (B,)
            index = torch.arange(start, start + x.shape[0], device=device) % max(groups, 1)  # (B,)
            by_group.index_add_(0, index, hits)
            if bar is not None:
                bar.update(1)
    return int(by_group.sum().item()), by_group.cpu()


def measure_resolution(model: Any, evalset: EvalSet, plan: AnalysisPlan, runner: PassRunner, info: Any,
                       device: torch.device, progress: bool | None = None) -> ResolutionSweep | None:  # fmt: skip
    """Top-1 at every size of ``plan.resolutions`` and at the native one, with intervals and A(size)/A(native), on
    the images, edits and bootstrap groups of the main analysis's passes (``runner``); None without resolutions."""
    if not plan.resolutions:
        return None
    if any(isinstance(e, PEResample) for e in runner.edits):
        raise ConfigError("analysis.resolutions cannot be combined with a pe_resample intervention: it moves the "
                          "grid itself")  # fmt: skip
    native = evalset.img_size
    for size in plan.resolutions:
        resolution_grid(size, native, model.grid)  # a size the patch does not divide fails before any pass
    lenses = runner.lenses
    boot = next(iter(lenses.values())).context.bootstrap if lenses else None
    clean = runner.run(PassSpec(None, 1.0, "all", None))
    chance = 1.0 / runner.num_classes if runner.num_classes else None
    resampler = Resampler(boot, len(evalset), chance)
    base = resampler.accuracy(int(clean.correct or 0), clean.correct_by_group)
    others = [s for s in plan.resolutions if s != native]
    unmoved = _cannot_move(model)
    others = [] if unmoved else others  # a PE that no edit can move: the native point only, and why
    was_training = model.training
    model.to(device).eval()
    estimates = {native: base}
    try:
        total = len(others) * math.ceil(len(evalset) / plan.batch_size)
        with progress_bar(total=total, desc="resolutions", unit="batch", show=progress, leave=False) as bar:
            for size in others:
                correct, by_group = grid_correct(model, evalset, size, edits=runner.edits, mean=info.mean,
                                                 std=info.std, batch_size=plan.batch_size, device=device,
                                                 groups=runner.groups, bar=bar)  # fmt: skip
                estimates[size] = resampler.accuracy(correct, by_group if runner.groups else None)
    finally:
        model.train(was_training)
    reason = chance_reason(base.value, resampler.interval(base), chance)
    points = [_point(size, resolution_grid(size, native, model.grid), e, base, reason, resampler)
              for size, e in sorted(estimates.items())]  # fmt: skip
    mode = resolution_edit(model, model.grid).mode
    return ResolutionSweep(native=native, coordinates=coordinates_convention(model), table_mode=f"{mode}, antialiased",
                           resize=RESIZE, points=points, not_measured=unmoved)  # fmt: skip


def _cannot_move(model: Any) -> str | None:
    """Why ``model`` cannot be moved to another grid (its PE has no hook point ``pe_resample`` reaches and the
    model takes no other grid: PEG, the relative bias), or None where it can."""
    try:
        resolution_edit(model, tuple(model.grid)).required_points(model.hook_points)
    except ConfigError as e:
        return f"the other sizes were not measured: {e}"
    return None


def _point(size: int, grid: tuple[int, int], acc: Estimate, native: Estimate, reason: str | None,
           resampler: Resampler) -> ResolutionPoint:  # fmt: skip
    """One size's record: its accuracy and, where the native accuracy is above chance, A(size)/A(native)."""
    if reason is not None or native.value == 0:
        relative = Estimate(math.nan, None)
        reason = reason or "the native accuracy is 0"
    else:
        reps = None
        if acc.replicates is not None and native.replicates is not None:
            reps = acc.replicates / native.replicates  # (R,): paired, the same resample of the images
        relative = Estimate(acc.value / native.value, reps)
    return ResolutionPoint(size=size, grid=list(grid), acc=acc.value, relative=relative.value,
                           acc_ci=resampler.interval(acc), relative_ci=resampler.interval(relative),
                           relative_undefined=reason)  # fmt: skip
