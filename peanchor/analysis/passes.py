"""Passes over an evaluation set: one model call per batch, accuracy and the lenses (SSDC, attention distance,
the position probe) from the same forward. Under RPI the position probe has a pass of its own with one permutation
per image (:meth:`PassRunner._probe_under_rpi` says why); the other lenses keep one permutation per call.

A :class:`PassSpec` names a pass (which images, which α, which probes, which RPI draw); :class:`PassRunner`
runs each distinct pass once on one device and keeps its result, so that the suite can plan every pass up
front and collapse duplicates (:mod:`peanchor.analysis.evaluate`).

Models only need the probe interface of :class:`peanchor.models.VisionTransformer` (``grid``, ``depth``,
``forward(x, token_perm, pe_scale)``, ``forward_with_tokens(...)``, ``spatial_tokens(..., num_layers=)``), and
``forward_with_tokens(..., attention=sink)`` where the model ``has_attention_weights``.

Imports: :mod:`peanchor.metrics` (the accumulators), :mod:`peanchor.interventions`, :mod:`peanchor.data`,
:mod:`peanchor.analysis` (shifts, evalset, lenses).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import Tensor, nn

from peanchor.analysis.shifts import Shift
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.lenses import LensPlan
from peanchor.interventions import random_permutation
from peanchor.metrics import SSDCAccumulator
from peanchor.metrics.attention_distance import AttentionDistanceAccumulator
from peanchor.metrics.position_probe import PositionProbeAccumulator

__all__ = ["PassResult", "PassRunner", "PassSpec", "Probes", "is_scalable"]

Probes = Literal["none", "all", "first2"]


def is_scalable(model: nn.Module) -> bool:
    """Whether the model's PE responds to ``pe_scale`` (α).

    Read from ``model.pe.scalable`` (peanchor's ViT: the PE class says) or a ``scalable`` /
    ``pe_scalable`` attribute of the model itself (adapters such as the timm wrapper).
    """
    pe = getattr(model, "pe", None)
    if isinstance(pe, nn.Module) and hasattr(pe, "scalable"):
        return bool(pe.scalable)
    for name in ("pe_scalable", "scalable"):
        flag = getattr(model, name, None)
        if isinstance(flag, bool):
            return flag
    return False


@dataclass(frozen=True)
class PassSpec:
    images: str  # "clean" or the JSON description of a shift
    alpha: float
    probes: Probes
    rpi_draw: int | None  # None: no permutation

    @property
    def label(self) -> str:
        what = "clean" if self.images == "clean" else Shift.from_dict(json.loads(self.images)).name
        rpi = f", rpi#{self.rpi_draw}" if self.rpi_draw is not None else ""
        probes = {"none": "", "all": ", probes", "first2": ", probes 0-1"}[self.probes]
        return f"{what}, alpha={self.alpha:g}{rpi}{probes}"


@dataclass
class PassResult:
    correct: int | None = None
    accumulator: SSDCAccumulator | None = None
    attention: AttentionDistanceAccumulator | None = None  # full probed passes of a model with attention weights
    position: PositionProbeAccumulator | None = None  # full probed passes


class PassRunner:
    """Runs passes over one evaluation set on one device and counts them."""

    def __init__(
        self,
        model: nn.Module,
        evalset: EvalSet,
        mean: Sequence[float],
        std: Sequence[float],
        *,
        sets: Mapping[str, Tensor],
        batch_size: int,
        device: torch.device,
        seed: int,
        make_accumulator: Any,
        bar: Any,
        lenses: LensPlan | None = None,
    ) -> None:
        from peanchor.data import normalize

        self.normalize = normalize
        self.model, self.evalset = model, evalset
        self.mean, self.std = tuple(mean), tuple(std)
        self.sets = dict(sets)  # images key → uint8 (N, 3, S, S), CPU (or already on the device)
        self.batch_size, self.device, self.seed = batch_size, device, seed
        self.make_accumulator = make_accumulator
        self.lenses = lenses
        self.heldout = lenses.heldout if lenses is not None else None  # (n,) bool, CPU: the probe's held-out images
        self.bar = bar
        self.done: dict[PassSpec, PassResult] = {}
        self.labels = evalset.labels.to(device)
        self._on_device: dict[str, Tensor] = {}
        self.first_layers = min(2, int(model.depth))

    def _images(self, key: str) -> Tensor:
        """The set for ``key``; on CUDA moved to the device once, if it fits comfortably."""
        images = self.sets[key]
        if self.device.type != "cuda":
            return images
        if key not in self._on_device:
            free, _ = torch.cuda.mem_get_info(self.device)
            if images.numel() < free // 4:
                self._on_device[key] = images.to(self.device, non_blocking=True)
            else:
                self._on_device[key] = images.pin_memory() if not images.is_pinned() else images
        return self._on_device[key]

    def run(self, spec: PassSpec) -> PassResult:
        if spec in self.done:
            return self.done[spec]
        model = self.model
        images = self._images(spec.images)
        n = images.shape[0]
        grid = tuple(model.grid)
        num_patches = grid[0] * grid[1]
        generator = torch.Generator().manual_seed(self.seed + spec.rpi_draw) if spec.rpi_draw is not None else None
        acc = self.make_accumulator() if spec.probes != "none" else None
        full = spec.probes == "all" and self.lenses is not None
        attention = self.lenses.attention_accumulator() if full else None  # type: ignore[union-attr]
        position = self.lenses.position_accumulator() if full else None  # type: ignore[union-attr]
        lens_kwargs = {"attention": attention} if attention is not None else {}
        autocast = (
            torch.autocast("cuda", dtype=torch.bfloat16) if self.device.type == "cuda" else contextlib.nullcontext()
        )
        with torch.inference_mode(), autocast:
            correct = torch.zeros((), dtype=torch.int64, device=self.device)  # summed on the device: no sync per batch
            for start in range(0, n, self.batch_size):
                batch = images[start : start + self.batch_size].to(self.device, non_blocking=True)
                x = self.normalize(batch, self.mean, self.std)  # (B, 3, S, S) float, on the device
                perm = None
                if generator is not None:  # one permutation per forward call, shared by the batch
                    perm = random_permutation(num_patches, generator=generator).to(self.device)  # (N,)
                labels = self.labels[start : start + batch.shape[0]]
                if spec.probes == "all":
                    # (B, C) and (B, L, N, D): accuracy and geometry from the same pass; attention weights
                    # are reduced block by block as the model hands them out
                    logits, tokens = model.forward_with_tokens(x, token_perm=perm, pe_scale=spec.alpha, **lens_kwargs)
                    acc.update(tokens)
                    if position is not None and perm is None:  # under RPI the probe has a pass of its own
                        position.update(tokens, self.heldout[start : start + batch.shape[0]])
                elif spec.probes == "first2":  # ΔSSDC needs probes 0 and 1 only: stop after block 0
                    tokens = model.spatial_tokens(x, token_perm=perm, pe_scale=spec.alpha, num_layers=self.first_layers)
                    acc.update(tokens)  # (B, 2, N, D)
                    logits = None
                else:
                    logits = model(x, token_perm=perm, pe_scale=spec.alpha)  # (B, C)
                if logits is not None:
                    correct += (logits.argmax(dim=-1) == labels).sum()
                if self.bar is not None:
                    self.bar.update(1)
            if position is not None and generator is not None:
                self._probe_under_rpi(images, spec.alpha, generator, position)
        result = PassResult(int(correct.item()) if spec.probes != "first2" else None, acc, attention, position)
        self.done[spec] = result
        return result

    def _probe_under_rpi(
        self, images: Tensor, alpha: float, generator: torch.Generator, position: PositionProbeAccumulator
    ) -> None:
        """The position probe's pass under RPI: one permutation per *image*, so that no two images share one.

        With a permutation shared by a batch, a probe fitted on some of its images can learn "content from
        position π(s) ⇒ slot s" and score it on the others (content carries position in any image with a layout);
        with one per image there is nothing shared to learn, and the probe reads only what the slots carry. The
        permutations continue ``generator`` after the pass's own draws, which therefore stay as they are.
        """
        assert self.heldout is not None
        num_patches = int(self.model.grid[0]) * int(self.model.grid[1])
        for start in range(0, images.shape[0], self.batch_size):
            batch = images[start : start + self.batch_size].to(self.device, non_blocking=True)
            x = self.normalize(batch, self.mean, self.std)  # (B, 3, S, S)
            perm = random_permutation(num_patches, batch=batch.shape[0], generator=generator).to(self.device)  # (B, N)
            _, tokens = self.model.forward_with_tokens(x, token_perm=perm, pe_scale=alpha)  # (B, L, N, D)
            position.update(tokens, self.heldout[start : start + batch.shape[0]])
            if self.bar is not None:
                self.bar.update(1)

    def accuracy(self, spec: PassSpec) -> float:
        correct = self.run(spec).correct
        assert correct is not None
        return correct / len(self.evalset)
