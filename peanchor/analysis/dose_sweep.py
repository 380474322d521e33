"""Dose-response sweeps (``--sweep``, docs/interventions.md): the analysis's numbers at α = 1 at every dose of one
edit parameter, on top of the plan's own edits (the base).

At every dose it measures what the main analysis measures at α = 1, from passes of the same kind, the same images
and the same RPI permutations:

=============================== ==================================================== ===============================
pass                            yields                                               forward
=============================== ==================================================== ===============================
clean                           top-1 and every lens, tokens in order                every layer, the head
RPI draw k                      the lenses under RPI, top-1 under RPI                every layer, the head
RPI draw k, per image           per-call RPI only: the lenses that ask for one       every layer, no head
                                permutation per image (the probe)
shift s                         top-1 under the shift (and so the FS at the dose)    ``layers=0``, the head
=============================== ==================================================== ===============================

**Cost.** The batch loop is outside and the doses inside: each batch of each pass is one
:func:`~peanchor.interventions.forward_doses` call, the pass under the base (what the main analysis runs, and the
donor ``patch`` reads) and one per dose, so k doses cost at most k + 1 model passes per batch, image set, RPI draw
and lens setting. Two exceptions. A dose that moves the grid (``pe_resample:grid=``) needs images of another size:
its batches are resized (bilinear, antialiased, after normalisation) and run in a call of their own with the other
doses at that grid (its first dose standing as that call's base), with RPI permutations of that grid's size from the
same seeds. And lenses that read attention weights (the attention distance) are measured at each dose through
separate ``forward_intermediates`` calls handed the weight sink, as the main analysis's full passes are (that path
rounds differently from the fused one, so the sweep's full passes take it too whenever such a lens is measured).

A dose at which a lens fails records its :class:`~peanchor.lenses.LensFailure` (SSDC's failure fails the analysis).
The identity dose (``rope_planes:freqs=none``, ``pe_resample`` to the model's own grid) gives the main analysis's
numbers exactly.

Imports: torch; :mod:`peanchor.interventions`, :mod:`peanchor.lenses`,
:mod:`peanchor.results.doses`, :mod:`peanchor.data`, :mod:`peanchor.core.bars`, :mod:`peanchor.analysis` (plan, evalset,
intervals).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.plan import AnalysisPlan
from peanchor.core.bars import progress_bar
from peanchor.results.doses import DosePoint, DoseSweep
from peanchor.interventions import Edit, Intervention, SweepSpec, fitted_edits, forward_doses, random_permutation
from peanchor.interventions.permutation import image_permutations
from peanchor.analysis.intervals import Resampler
from peanchor.lenses import Lens, LensBatch, LensFailure

__all__ = ["measure_dose_sweeps"]

PassKey = tuple[str, int | None]  # (images: "clean", a shift's name or "per_image"; the RPI draw or None)


@dataclass
class _Dose:
    """One dose's edits, grid, lenses and what its passes have gathered."""

    label: str
    edit: Edit
    edits: tuple[Edit, ...]  # the base's, then the dose's
    grid: tuple[int, int]
    lenses: dict[str, Lens]
    states: dict[PassKey, dict[str, Any]] = field(default_factory=dict)
    correct: dict[PassKey, Tensor] = field(default_factory=dict)
    by_group: dict[PassKey, Tensor] = field(default_factory=dict)  # (G,): correct per group of the bootstrap
    failed: dict[str, LensFailure] = field(default_factory=dict)

    def guard(self, name: str, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` for lens ``name`` unless it failed before; a failure marks it (a required lens raises)."""
        if name in self.failed:
            return None
        try:
            return call(*args)
        except Exception as e:  # one lens must not lose the dose
            if self.lenses[name].required:
                raise
            self.failed[name] = LensFailure.of(e)
            return None


def measure_dose_sweeps(
    model: nn.Module,
    evalset: EvalSet,
    plan: AnalysisPlan,
    *,
    sets: Mapping[str, Tensor],
    lenses: Mapping[str, Lens],
    base: tuple[Edit, ...],
    mean: Sequence[float],
    std: Sequence[float],
    device: torch.device,
    progress: bool | None = None,
) -> tuple[list[DoseSweep], list[str]]:
    """Every sweep of ``plan.sweeps`` measured on ``model`` (on ``device``, in eval mode) and its notes.

    ``sets``: ``"clean"`` and each of the plan's shifts by name → uint8 images ``(N, 3, S, S)``; ``lenses``: the main
    analysis's lenses (each dose gets fresh ones on the same context, at its own grid); ``base``: the main analysis's
    edits, already fitted (a mean ablation's means).
    """
    out: list[DoseSweep] = []
    notes: list[str] = []
    for text in plan.sweeps:
        spec = SweepSpec.parse(text)
        doses = _doses(model, evalset, spec, lenses, base, mean, std, device)
        runner = _Runner(model, evalset, plan, sets, base, mean, std, device, progress)
        runner.groups = next(iter(lenses.values())).context.groups if lenses else 0
        counts = runner.run(doses, spec.text)
        boot = next(iter(lenses.values())).context.bootstrap if lenses else None
        resampler = Resampler(boot, len(evalset), 1.0 / runner.num_classes if runner.num_classes else None)
        out.append(_sweep(spec, base, doses, plan, resampler, counts))
        notes += [f"{spec.text} at {d.label}: {n}: {note}" for d in doses for n, lens in d.lenses.items()
                  for note in lens.notes]  # fmt: skip
    return out, notes


def _doses(model: nn.Module, evalset: EvalSet, spec: SweepSpec, lenses: Mapping[str, Lens], base: tuple[Edit, ...],
           mean: Sequence[float], std: Sequence[float], device: torch.device) -> list[_Dose]:  # fmt: skip
    """The doses of ``spec``, each edit fitted (a mean ablation's means, under the plain pass) and checked."""
    from peanchor.data import normalize

    def batches() -> Any:
        return (normalize(evalset.images[i : i + 64].to(device), tuple(mean), tuple(std))
                for i in range(0, len(evalset), 64))  # fmt: skip

    hooks = model.hook_points
    out = []
    for label, edit in zip(spec.doses, spec.edits()):
        (edit,) = fitted_edits((edit,), model, batches)
        grid = next((g for e in (*base, edit) if (g := e.pass_grid(hooks)) is not None), None)
        grid = tuple(int(g) for g in (grid or model.grid))
        at_grid = {name: type(lens)(dataclasses.replace(lens.context, grid=grid), lens.options)
                   for name, lens in lenses.items()}  # fmt: skip
        chosen = {name: lens for name, lens in at_grid.items() if lens.required or type(lens).applies(lens.context)}
        out.append(_Dose(label, edit, (*base, edit), grid, chosen))  # type: ignore[arg-type]
    return out


class _Runner:
    """The passes of one sweep: the batch loop outside, the doses inside (one call per batch and image set)."""

    def __init__(self, model: nn.Module, evalset: EvalSet, plan: AnalysisPlan, sets: Mapping[str, Tensor],
                 base: tuple[Edit, ...], mean: Sequence[float], std: Sequence[float], device: torch.device,
                 progress: bool | None) -> None:  # fmt: skip
        from peanchor.data import normalize

        self.normalize = normalize
        self.model, self.evalset, self.plan, self.sets, self.base = model, evalset, plan, sets, base
        self.mean, self.std, self.device, self.progress = tuple(mean), tuple(std), device, progress
        self.grid = tuple(int(g) for g in model.grid)
        self.patch = evalset.img_size // self.grid[0]
        self.labels = evalset.labels.to(device)
        self.calls: dict[PassKey, int] = {}  # model passes per batch of each pass
        self.groups = 0  # of the analysis's bootstrap: the correct answers are also counted per group
        self.num_classes: int | None = None

    def run(self, doses: list[_Dose], label: str) -> dict[PassKey, int]:
        """Every pass of every dose; returns the model passes per batch of each pass."""
        keys: list[PassKey] = [("clean", None), *(("clean", k) for k in range(self.plan.rpi_draws)),
                               *((name, None) for name in self.plan.shifts)]  # fmt: skip
        batches = math.ceil(len(self.evalset) / self.plan.batch_size)
        own = self.plan.rpi_mode == "per_call" and any(lens.rpi == "per_image" for d in doses for lens in d.lenses.values())
        total = (len(keys) + (self.plan.rpi_draws if own else 0)) * batches
        autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda"
                    else contextlib.nullcontext())  # fmt: skip
        with progress_bar(total=total, desc=f"sweep {label}", unit="batch", show=self.progress, leave=False) as bar:
            with torch.inference_mode(), autocast:
                for key in keys:
                    self._pass(key, doses, bar)
        return self.calls

    def _pass(self, key: PassKey, doses: list[_Dose], bar: Any) -> None:
        images, draw = key
        full = images == "clean"
        groups: dict[tuple[int, int], list[_Dose]] = {self.grid: []}  # the model's grid first: its call has the base
        for d in doses:
            groups.setdefault(d.grid, []).append(d)
        per_call = draw is not None and self.plan.rpi_mode == "per_call"  # else each image its own stream
        generators = {g: torch.Generator().manual_seed(self.plan.seed + draw) for g in groups} if per_call else {}
        fed: dict[int, list[tuple[str, Lens, Any]]] = {}
        for d in doses:
            d.correct[key] = torch.zeros((), dtype=torch.int64, device=self.device)
            d.by_group[key] = torch.zeros(max(self.groups, 1), dtype=torch.int64, device=self.device)
            if full:
                states = {n: d.guard(n, lens.accumulator) for n, lens in d.lenses.items()}
                d.states[key] = {n: s for n, s in states.items() if n not in d.failed}
                fed[id(d)] = [(n, d.lenses[n], s) for n, s in d.states[key].items()
                              if not (per_call and d.lenses[n].rpi == "per_image")]  # fmt: skip
        eager = full and any(lens.reads_attention for d in doses for lens in d.lenses.values())
        layers, head = (None, True) if full else (0, True)
        for start in range(0, len(self.evalset), self.plan.batch_size):
            x = self._batch(images, start)  # (B, 3, S, S)
            calls = 0
            for grid, group in groups.items():
                n = grid[0] * grid[1]
                perm = self._permutation(n, draw, generators.get(grid), start, x.shape[0])  # None, (N,) or (B, N)
                xg = self._resized(x, grid)
                ivs = [Intervention(perm, 1.0, d.edits) for d in group]
                if eager:  # the attention weights: one call per dose, with its sink
                    outs = [self._with_attention(xg, iv, d, fed[id(d)]) for iv, d in zip(ivs, group)]
                    calls += len(group)
                elif grid == self.grid:
                    _, outs = forward_doses(self.model, xg, Intervention(perm, 1.0, self.base), ivs, layers=layers,
                                            head=head)  # fmt: skip
                    calls += 1 + len(group)
                elif group:
                    first, rest = forward_doses(self.model, xg, ivs[0], ivs[1:], layers=layers, head=head)
                    outs = [first, *rest]
                    calls += len(group)
                else:
                    continue
                for d, out in zip(group, outs):
                    self._take(d, key, out, start, perm, fed.get(id(d), []))
            self.calls[key] = calls
            if bar is not None:
                bar.update(1)
        if full and per_call:
            self._per_image_pass(key, groups, generators, bar)

    def _permutation(self, n: int, draw: int | None, generator: torch.Generator | None, start: int,
                     b: int) -> Tensor | None:  # fmt: skip
        """A batch's permutation of ``n`` slots: None without RPI, ``(N,)`` from the grid's generator (per call), else
        ``(B, N)`` from each image's own stream, as in the main analysis (per image)."""
        if draw is None:
            return None
        if generator is not None:
            return random_permutation(n, generator=generator).to(self.device)  # (N,)
        rows = image_permutations(n, list(range(start, start + b)), seed=self.plan.seed, draw=draw)
        return rows.to(self.device)  # (B, N)

    def _per_image_pass(self, key: PassKey, groups: Mapping[tuple[int, int], list[_Dose]],
                        generators: Mapping[tuple[int, int], torch.Generator], bar: Any) -> None:  # fmt: skip
        """The pass under RPI of the lenses that ask for one permutation per image (the main analysis's own pass
        for them), continuing each grid's generator after the draw's pass."""
        own = {id(d): [(n, d.lenses[n], s) for n, s in d.states[key].items() if d.lenses[n].rpi == "per_image"]
               for ds in groups.values() for d in ds}  # fmt: skip
        if not any(own.values()):
            return
        for start in range(0, len(self.evalset), self.plan.batch_size):
            x = self._batch("clean", start)
            calls = 0
            for grid, group in groups.items():
                n = grid[0] * grid[1]
                perm = random_permutation(n, batch=x.shape[0], generator=generators[grid]).to(self.device)  # (B, N)
                ivs = [Intervention(perm, 1.0, d.edits) for d in group]
                xg = self._resized(x, grid)
                if grid == self.grid:
                    _, outs = forward_doses(self.model, xg, Intervention(perm, 1.0, self.base), ivs, head=False)
                    calls += 1 + len(group)
                elif group:
                    first, rest = forward_doses(self.model, xg, ivs[0], ivs[1:], head=False)
                    outs = [first, *rest]
                    calls += len(group)
                else:
                    continue
                for d, out in zip(group, outs):
                    batch = LensBatch(out.tokens, start, perm)
                    for n, lens, state in own[id(d)]:
                        d.guard(n, lens.update, state, batch)
            self.calls[("per_image", key[1])] = calls
            if bar is not None:
                bar.update(1)

    def _with_attention(self, x: Tensor, iv: Intervention, d: _Dose, fed: list[tuple[str, Lens, Any]]) -> Any:
        readers = [(n, lens, s) for n, lens, s in fed if lens.reads_attention]

        def sink(block: int, weights: Tensor) -> None:
            for n, lens, state in readers:
                d.guard(n, lens.attend, state, block, weights)

        return self.model.forward_intermediates(x, iv, attention=sink)

    def _take(self, d: _Dose, key: PassKey, out: Any, start: int, perm: Tensor | None,
              fed: list[tuple[str, Lens, Any]]) -> None:  # fmt: skip
        """One batch's output of one dose: its accuracy and its lenses."""
        if out.tokens is not None and fed:  # (B, L, N, D)
            batch = LensBatch(out.tokens, start, perm)
            for n, lens, state in fed:
                d.guard(n, lens.update, state, batch)
        if out.logits is not None:  # (B, C)
            labels = self.labels[start : start + out.logits.shape[0]]
            hits = out.logits.argmax(dim=-1) == labels  # (B,)
            d.correct[key] += hits.sum()
            if self.groups:
                group = torch.arange(start, start + hits.shape[0], device=self.device) % self.groups  # (B,)
                d.by_group[key].index_add_(0, group, hits.to(torch.int64))
            self.num_classes = int(out.logits.shape[-1])

    def _batch(self, images: str, start: int) -> Tensor:
        """The normalised batch at ``start`` of the clean set or a shift's, on the device."""
        batch = self.sets[images][start : start + self.plan.batch_size].to(self.device, non_blocking=True)
        return self.normalize(batch, self.mean, self.std)

    def _resized(self, x: Tensor, grid: tuple[int, int]) -> Tensor:
        """``x`` at ``grid``'s pixel size (itself at the model's grid)."""
        if grid == self.grid:
            return x
        size = (grid[0] * self.patch, grid[1] * self.patch)
        return F.interpolate(x, size=size, mode="bilinear", antialias=True, align_corners=False)  # (B, 3, H', W')


def _sweep(spec: SweepSpec, base: tuple[Edit, ...], doses: list[_Dose], plan: AnalysisPlan, resampler: Resampler,
           calls: Mapping[PassKey, int]) -> DoseSweep:  # fmt: skip
    """The sweep's record from its doses' passes (FS NaN, with the reason, where the clean accuracy is at chance)."""
    rpi = [("clean", k) for k in range(plan.rpi_draws)]
    n = resampler.num_images
    points = []
    for d in doses:
        def estimate(key: PassKey) -> Any:
            return resampler.accuracy(int(d.correct[key].item()), d.by_group[key].cpu() if resampler.boot else None)

        clean_estimate = estimate(("clean", None))
        clean = clean_estimate.value
        acc = {name: int(d.correct[(name, None)].item()) / n for name in plan.shifts}
        fs = {name: resampler.fragility(clean_estimate, estimate((name, None))) for name in plan.shifts}
        records: dict[str, Any] = {}
        for name, lens in d.lenses.items():
            if name in d.failed:
                records[name] = d.failed[name]
                continue
            try:
                records[name] = lens.record(d.states[("clean", None)][name], [d.states[k][name] for k in rpi])
            except Exception as e:  # one lens must not lose the dose
                if lens.required:
                    raise
                records[name] = LensFailure.of(e)
        points.append(DosePoint(
            dose=d.label, spec=d.edit.spec, grid=list(d.grid), clean_acc=clean,
            rpi_acc=float(np.mean([int(d.correct[k].item()) / n for k in rpi])), acc=acc,
            fragility={name: e.value for name, (e, _) in fs.items()}, lenses=records,
            fragility_undefined={name: why for name, (_, why) in fs.items() if why} or None,
        ))  # fmt: skip
    return DoseSweep(sweep=spec.text, kind=spec.kind, parameter=spec.parameter, base=[e.spec for e in base],
                     doses=points, forward_passes=sum(calls.values()), passes_per_batch=max(calls.values()))
