"""Passes over an evaluation set: one model call per batch, accuracy and the lenses (:mod:`peanchor.lenses`) from
the same forward (a lens that raises is marked failed and fed no more; :attr:`PassRunner.failed`).

Under RPI (``rpi_mode`` ``"per_image"``, the default) every image gets a permutation of its own, from a stream keyed
by (seed, draw, the image's index in the evaluation set)
(:func:`~peanchor.interventions.permutation.image_permutations`): an image is permuted the same way whatever batch it
is in, at every α and in every pass of the same draw, so no number depends on the batch size. With ``"per_call"``
(the paper's) one permutation per forward call is shared by the batch, from a generator seeded ``seed + draw``; a
lens that asks for one permutation per image (the position probe) is then fed from a pass of its own
(:meth:`PassRunner._per_image_pass` says why).

With ``groups`` > 0 a pass also counts its correct answers per group of images (``index % groups``,
:mod:`peanchor.metrics.bootstrap`), for the accuracies' bootstrap intervals.

A :class:`PassSpec` names a pass (which images, which α, which probes, which RPI draw); :class:`PassRunner`
runs each distinct pass once on one device and keeps its result, so that the suite can plan every pass up
front and collapse duplicates (:mod:`peanchor.analysis.evaluate`).

Models only need the analysis interface (:meth:`~peanchor.models.interface.AnalysisInterface.forward_intermediates`
with ``grid`` and ``depth``); lenses that read attention weights are measured only where the model
``has_attention_weights``. A truncated pass (probes ``"first2"``, the ΔSSDC passes of the α sweep) feeds the lenses
that say they are measured there (:attr:`~peanchor.lenses.Lens.truncated`).

Imports: :mod:`peanchor.lenses`, :mod:`peanchor.interventions`, :mod:`peanchor.data`, :mod:`peanchor.analysis`
(shifts, evalset), :mod:`peanchor.models` (the interface).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.shifts import Shift
from peanchor.interventions import Edit, Intervention, fitted_edits, random_permutation
from peanchor.interventions.permutation import image_permutations
from peanchor.lenses import Lens, LensBatch, LensFailure
from peanchor.models.interface import AnalysisInterface

__all__ = ["PassResult", "PassRunner", "PassSpec", "Probes"]

Probes = Literal["none", "all", "first2"]


@dataclass(frozen=True)
class PassSpec:
    """One pass: which images (``shift``: the set under that :class:`Shift`; None: the clean images), which α,
    which probes, which RPI draw."""

    shift: Shift | None  # None: the clean images
    alpha: float
    probes: Probes
    rpi_draw: int | None  # None: no permutation

    @property
    def label(self) -> str:
        what = "clean" if self.shift is None else self.shift.name
        rpi = f", rpi#{self.rpi_draw}" if self.rpi_draw is not None else ""
        probes = {"none": "", "all": ", probes", "first2": ", probes 0-1"}[self.probes]
        return f"{what}, alpha={self.alpha:g}{rpi}{probes}"


@dataclass
class PassResult:
    correct: int | None = None  # None for a pass without the head (probes "first2")
    states: dict[str, Any] = field(default_factory=dict)  # lens name → its state after the pass
    correct_by_group: Tensor | None = None  # (G,) int64 on the CPU, with groups and the head


class PassRunner:
    """Runs passes over one evaluation set on one device and counts them."""

    def __init__(
        self,
        model: AnalysisInterface,
        evalset: EvalSet,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        sets: Mapping[Shift, Tensor] | None = None,
        batch_size: int,
        device: torch.device,
        seed: int,
        lenses: Mapping[str, Lens],
        bar: Any,
        edits: tuple[Edit, ...] = (),
        eager_attention: bool = False,
        rpi_mode: str = "per_image",
        groups: int = 0,
    ) -> None:
        from peanchor.data import normalize

        self.normalize = normalize
        self.model, self.evalset = model, evalset
        self.mean, self.std = tuple(mean), tuple(std)
        self.sets = dict(sets or {})  # shift → the corrupted set, uint8 (N, 3, S, S), CPU (or already on the device)
        self.batch_size, self.device, self.seed = batch_size, device, seed
        if rpi_mode not in ("per_image", "per_call"):
            raise ValueError(f"rpi_mode must be per_image or per_call, got {rpi_mode!r}")
        self.rpi_mode, self.groups = rpi_mode, groups
        self.num_classes: int | None = None  # read off the first logits
        self.lenses = dict(lenses)  # measured in every full pass; those that say ``truncated`` in the "first2" ones
        self.bar = bar
        # The attention weights are handed out by the model's eager path, whose float rounding differs from the
        # fused one's: passes measured apart from an analysis whose lenses read them take that path too, to match.
        self.eager_attention = eager_attention
        self.done: dict[PassSpec, PassResult] = {}
        self.failed: dict[str, LensFailure] = {}  # lens name → how it failed (it is fed no more)
        self.labels = evalset.labels.to(device)
        self._on_device: dict[Shift | None, Tensor] = {}
        self.first_layers = min(2, int(model.depth))
        self.num_patches = int(model.grid[0]) * int(model.grid[1])
        self.edits = fitted_edits(edits, model, lambda: (x for _, x in self._batches(self._images(None))))

    def _images(self, key: Shift | None) -> Tensor:
        """The images under shift ``key`` (None: the clean ones); on CUDA moved to the device once, if they fit
        comfortably."""
        images = self.evalset.images if key is None else self.sets[key]
        if self.device.type != "cuda":
            return images
        if key not in self._on_device:
            free, _ = torch.cuda.mem_get_info(self.device)
            if images.numel() < free // 4:
                self._on_device[key] = images.to(self.device, non_blocking=True)
            else:
                self._on_device[key] = images.pin_memory() if not images.is_pinned() else images
        return self._on_device[key]

    def _batches(self, images: Tensor) -> Iterator[tuple[int, Tensor]]:
        """``(start, normalised batch (B, 3, S, S) on the device)`` over ``images``."""
        for start in range(0, images.shape[0], self.batch_size):
            batch = images[start : start + self.batch_size].to(self.device, non_blocking=True)
            yield start, self.normalize(batch, self.mean, self.std)

    def run(self, spec: PassSpec) -> PassResult:
        if spec in self.done:
            return self.done[spec]
        model = self.model
        images = self._images(spec.shift)
        per_call = spec.rpi_draw is not None and self.rpi_mode == "per_call"
        generator = torch.Generator().manual_seed(self.seed + spec.rpi_draw) if per_call else None  # type: ignore[operator]
        # every lens in a full pass, those measured in the truncated ones (SSDC: ΔSSDC) there, none in a pass for
        # accuracy only; a lens that failed earlier is not fed again
        wanted = {"all": self.lenses, "first2": [n for n, lens in self.lenses.items() if lens.truncated],
                  "none": ()}[spec.probes]  # fmt: skip
        measured = {n: self.lenses[n] for n in wanted if n not in self.failed}
        states = {n: self._guard(n, lens, lens.accumulator) for n, lens in measured.items()}
        states = {n: state for n, state in states.items() if n not in self.failed}
        # Under per-call RPI a lens that asks for one permutation per image is fed from a pass of its own (see below).
        own_pass = [n for n in states if measured[n].rpi == "per_image"] if generator is not None else []
        fed = [(n, measured[n], states[n]) for n in states if n not in own_pass]
        readers = [(n, lens, state) for n, lens, state in fed if lens.reads_attention]

        def sink(block: int, weights: Tensor) -> None:  # one block's attention weights, to the lenses that read them
            for n, lens, state in readers:
                self._guard(n, lens, lens.attend, state, block, weights)

        layers = {"all": None, "first2": self.first_layers, "none": 0}[spec.probes]
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda" else contextlib.nullcontext()
        )
        with torch.inference_mode(), autocast:
            correct = torch.zeros((), dtype=torch.int64, device=self.device)  # summed on the device: no sync per batch
            by_group = torch.zeros(max(self.groups, 1), dtype=torch.int64, device=self.device)  # (G,)
            for start, x in self._batches(images):
                perm = self._permutation(spec.rpi_draw, generator, start, x.shape[0])  # None, (N,) or (B, N)
                # Accuracy and the lenses from the same pass; attention weights are reduced block by block as the model
                # hands them out; ΔSSDC needs layers 0 and 1 only ("first2": the pass stops after block 1's norm).
                out = model.forward_intermediates(x, Intervention(perm, spec.alpha, self.edits), layers=layers,
                                                  head=spec.probes != "first2",
                                                  attention=sink if readers or (self.eager_attention and
                                                                                spec.probes == "all") else None)  # fmt: skip
                if out.tokens is not None:  # (B, L, N, D)
                    batch = LensBatch(out.tokens, start, perm)
                    for n, lens, state in fed:
                        self._guard(n, lens, lens.update, state, batch)
                if out.logits is not None:  # (B, C)
                    labels = self.labels[start : start + x.shape[0]]
                    hits = out.logits.argmax(dim=-1) == labels  # (B,)
                    correct += hits.sum()
                    if self.groups:
                        group = torch.arange(start, start + x.shape[0], device=self.device) % self.groups  # (B,)
                        by_group.index_add_(0, group, hits.to(torch.int64))
                    self.num_classes = int(out.logits.shape[-1])
                if self.bar is not None:
                    self.bar.update(1)
            if own_pass:
                self._per_image_pass(images, spec.alpha, generator, [(n, measured[n], states[n]) for n in own_pass])
        with_head = spec.probes != "first2"
        result = PassResult(int(correct.item()) if with_head else None, states,
                            by_group.cpu() if with_head and self.groups else None)  # fmt: skip
        self.done[spec] = result
        return result

    def _permutation(self, draw: int | None, generator: torch.Generator | None, start: int, b: int) -> Tensor | None:
        """The permutation of a batch of ``b`` images from ``start``: None without RPI; ``(N,)`` from ``generator``
        (per call); else ``(B, N)``, each image's from its own stream (per image)."""
        if draw is None:
            return None
        if generator is not None:  # one permutation per forward call, shared by the batch
            return random_permutation(self.num_patches, generator=generator).to(self.device)  # (N,)
        rows = image_permutations(self.num_patches, list(range(start, start + b)), seed=self.seed, draw=draw)
        return rows.to(self.device, non_blocking=True)  # (B, N)

    def _per_image_pass(
        self, images: Tensor, alpha: float, generator: torch.Generator | None, lenses: list[tuple[str, Lens, Any]]
    ) -> None:
        """The pass under RPI of the lenses that ask for one permutation per *image*, so that no two images share one.

        With a permutation shared by a batch, a probe fitted on some of its images can learn "content from position
        π(s) ⇒ slot s" and score it on the others (content carries position in any image with a layout); with one
        per image there is nothing shared to learn. The permutations continue ``generator`` after the pass's own
        draws, which therefore stay as they are.
        """
        for start, x in self._batches(images):
            perm = random_permutation(self.num_patches, batch=x.shape[0], generator=generator).to(self.device)  # (B, N)
            run = Intervention(perm, alpha, self.edits)
            tokens = self.model.forward_intermediates(x, run, head=False).tokens  # (B, L, N, D)
            batch = LensBatch(tokens, start, perm)
            for n, lens, state in lenses:
                self._guard(n, lens, lens.update, state, batch)
            if self.bar is not None:
                self.bar.update(1)

    def _guard(self, name: str, lens: Lens, call: Callable[..., Any], *args: Any) -> Any:
        """``call(*args)`` for lens ``name``, unless it failed before; an exception from it marks the lens failed
        (:attr:`failed`) instead of ending the analysis, except for a ``required`` lens. Returns what the call
        returned, or None."""
        if name in self.failed:
            return None
        try:
            return call(*args)
        except Exception as e:  # one lens must not lose the others, the accuracies or the FS
            if lens.required:
                raise
            self.failed[name] = LensFailure.of(e)
            return None

    def accuracy(self, spec: PassSpec) -> float:
        correct = self.run(spec).correct
        assert correct is not None
        return correct / len(self.evalset)
