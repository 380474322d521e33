"""The audit's probe inputs and measuring tools. No dataset: constant images, random images and images with one
bright patch are built here, at the model's own resolution or at another patch grid.

:class:`Capture` is an edit that changes nothing: it records the value a pass hands to a hook point (the table,
the rotary tables, the residual stream leaving block 0), so a check reads what the model really uses.

Imports: torch; :mod:`peanchor.interventions` (Edit, Intervention), :mod:`peanchor.metrics` (the position probe).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from peanchor.interventions import Edit, HookPoints, Intervention, PETable, RopeTables
from peanchor.metrics.position_probe import PositionProbeAccumulator

__all__ = ["PROBES", "Capture", "bright_patch_images", "constant_images", "layer0_tokens", "max_diff",
           "own_rope_angles", "probe_r2", "random_images", "tolerance", "watcher"]  # fmt: skip


def constant_images(count: int, size: tuple[int, int], seed: int = 0) -> Tensor:
    """``(count, 3, H, W)`` images, each one random colour, every channel in [0.25, 1] (normalised units). The
    colours share a sign, so that what a stem's zero padding leaks at the borders (proportional to the colour)
    points the same way in every image and a probe fitted on some images reads it on the others."""
    g = torch.Generator().manual_seed(seed)
    colours = 0.25 + 0.75 * torch.rand(count, 3, 1, 1, generator=g)
    return colours.expand(count, 3, *size).contiguous()


def random_images(count: int, size: tuple[int, int], seed: int = 0) -> Tensor:
    """``(count, 3, H, W)`` images of i.i.d. N(0, 1) pixels."""
    return torch.randn(count, 3, *size, generator=torch.Generator().manual_seed(seed))


def bright_patch_images(grid: tuple[int, int], patch: int, slots: list[int]) -> Tensor:
    """One image per slot in ``slots``: zero everywhere except the patch at that row-major slot, which is 3."""
    rows, cols = grid
    images = torch.zeros(len(slots), 3, rows * patch, cols * patch)
    for i, slot in enumerate(slots):
        r, c = divmod(slot, cols)
        images[i, :, r * patch : (r + 1) * patch, c * patch : (c + 1) * patch] = 3.0
    return images


def layer0_tokens(model: Any, images: Tensor, intervention: Intervention | None = None) -> Tensor:
    """What block 0's attention sees of the patch slots: ``(B, N, D)`` (the first SSDC probe)."""
    iv = intervention if intervention is not None else Intervention()
    with torch.no_grad():
        out = model.forward_intermediates(images, iv, layers=1, head=False)
    return out.tokens[:, 0].float()  # (B, N, D)


def probe_r2(tokens: Tensor, grid: tuple[int, int]) -> float:
    """Held-out R² (mean of row and column) of a linear probe from each token ``(B, N, D)`` to its slot, fitted
    on the first half of the images and scored on the second (:class:`PositionProbeAccumulator`). Each image's
    mean token is taken out first, so that what differs between images (a constant image's colour) does not
    swamp what differs between slots in the probe's ridge penalty. Tokens that do not vary over the slots give 0."""
    b = tokens.shape[0]
    tokens = tokens.double() - tokens.double().mean(dim=1, keepdim=True)  # (B, N, D): the slots' differences
    if float(tokens.abs().max()) <= 1e-12 * float(tokens.abs().max().clamp_min(1.0)):
        return 0.0  # nothing varies: the probe can do no better than the mean slot
    acc = PositionProbeAccumulator(grid)
    heldout = torch.arange(b) >= b // 2
    acc.update(tokens[:, None], heldout)
    return float(acc.compute()[0].nanmean())


#: Random images per probe pass. Every comparison is per image and per token (nothing pools over images), so one
#: image is as sensitive as more; the checks' passes of the same image share the model's own forward.
PROBES = 1

#: The relative tolerance of a comparison made in float16 or bfloat16, whose rounding adds up over the layers.
LOW_PRECISION = 5e-2


def tolerance(fp32: float, dtype: torch.dtype) -> float:
    """A check's float32 tolerance, or :data:`LOW_PRECISION` where the model runs in float16 or bfloat16."""
    return fp32 if dtype in (torch.float32, torch.float64) else max(fp32, LOW_PRECISION)


def watcher(subject: Any) -> Any:
    """The observer of the model's own forward (:mod:`peanchor.audit.observe`) in the audit's dtype: the model as
    the library runs it; None for peanchor's ViT, whose analysis pass is its own forward."""
    return subject.parity_observer or subject.observer


def own_rope_angles(obs: Any, seen: Any, grid: tuple[int, int]) -> tuple[Tensor, Tensor, str] | None:
    """The rotary angles the model's own forward handed block 0 (head 0) and the declared ones, each
    ``(rows, cols, hd/2)`` in the declared plane order, with the declared facts; None where no rotary table was
    handed on or the reference does not model the model's rope. The channels of each plane are the declared
    layout's (``half``: j and j + hd/2; ``interleaved``: 2j and 2j + 1), never read off the model's table.
    timm hands its blocks ``cat([sin, cos])``; transformers' rotary module returns ``(cos, sin)``."""
    declared = obs.declared_rope(grid)
    if declared is None or isinstance(declared, str):
        return None
    got = obs.rotary_cos_sin(seen, 0)
    if got is None:
        return None
    cos, sin = got
    n = grid[0] * grid[1]
    cos, sin = cos.reshape(-1, n, cos.shape[-1])[0], sin.reshape(-1, n, sin.shape[-1])[0]  # (N, hd): head 0
    half = cos.shape[-1] // 2
    index = torch.arange(half) if declared.layout == "half" else torch.arange(half) * 2
    own = torch.atan2(sin[:, index], cos[:, index])  # (N, hd/2)
    ref = declared.angles.reshape(-1, n, declared.angles.shape[-1])[0]  # (N, hd/2)
    wrap = lambda a: (torch.remainder(a + torch.pi, 2 * torch.pi) - torch.pi).reshape(*grid, -1)  # noqa: E731
    return wrap(own), wrap(ref), declared.source


def max_diff(a: Tensor, b: Tensor) -> float:
    """``max |a - b|`` relative to ``max |b|`` (at least 1e-12)."""
    a, b = a.double(), b.double()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-12))


class Capture(Edit):
    """An edit that records the value at its hook point and hands it on unchanged.

    ``point`` is ``pe.table``, ``rope.tables``, ``pe.bias``, ``pe.rotation`` or ``blocks.{k}.residual`` (layer 0: the stream leaving block 0,
    prefix tokens included)."""

    kind = "audit_capture"
    summary = "records a hook point's value (the audit's instrument)"

    def __init__(self, point: str) -> None:
        self.point = point
        self.points = (point,)
        self.value: Any = None

    def block_sites(self, hooks: HookPoints) -> frozenset[tuple[str, int]]:
        return frozenset({("residual", 0)}) if self.point.startswith("blocks.") else frozenset()

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        if self.point == "pe.table":  # a pass that also builds rotary tables (pe_resample) calls both hooks
            self.value = table
        return table

    def on_rope(self, tables: RopeTables, hooks: HookPoints) -> RopeTables:
        if self.point == "rope.tables":
            self.value = tables
        return tables

    def on_bias(self, bias: Tensor | None, hooks: HookPoints) -> Tensor | None:
        if self.point == "pe.bias":
            self.value = bias
        return bias

    def on_rotation(self, rotation: Any, hooks: HookPoints) -> Any:
        if self.point == "pe.rotation":
            self.value = rotation
        return rotation

    def on_block(self, site: str, layer: int, x: Tensor, run: Any) -> Tensor:
        self.value = x.detach()
        return x

    @property
    def spec(self) -> str:
        return f"{self.kind}:point={self.point}"


def captured(model: Any, images: Tensor, point: str, *edits: Edit, full: bool = False) -> Any:
    """The value at ``point`` in a pass of ``images`` under ``edits`` (the capture acts after them). The pass
    stops after block 0 unless ``full``."""
    capture = Capture(point)
    iv = Intervention(edits=(*edits, capture))
    with torch.no_grad():
        if full:
            model.forward_intermediates(images, iv)
        else:
            model.forward_intermediates(images, iv, layers=1, head=point.startswith("blocks."))
    return capture.value
