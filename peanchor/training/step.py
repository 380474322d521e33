"""The training step and what makes it fast on a GPU, each behind a device check so that CPU training stays the
same computation, bit for bit.

* :class:`TrainingForward`: normalise → model → cross-entropy as one module, the unit that ``torch.compile``
  (``train.compile``: forward and, through AOTAutograd, backward) and DDP wrap.
* :func:`build_optimizer`: AdamW, fused into one kernel per step on CUDA (``fused=True``); on CPU the default
  implementation, as before.
* :func:`configure_backends`: TF32 tensor cores for the float32 matmuls and convolutions that bf16 autocast
  leaves in float32 (``train.tf32``, CUDA only).
* :func:`wrap_ddp`: DDP without re-broadcasting buffers on every forward: a ViT's buffers (relative-position
  index, RoPE and sin-cos tables) are constants, built identically on every rank.
* :class:`DeviceBatches`: batches on the device, copied from pinned memory on a side CUDA stream while the
  previous step computes; on CPU a plain ``.to(device)``.

Imports: torch; :mod:`peanchor.data` (``normalize``), :mod:`peanchor.training.config`,
:mod:`peanchor.training.distributed`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Iterator
from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.data import normalize
from peanchor.training.config import OptimConfig, TrainConfig
from peanchor.training.distributed import DistContext

__all__ = ["DeviceBatches", "TrainingForward", "autocast", "build_optimizer", "configure_backends", "wrap_ddp"]


def autocast(device: torch.device, amp: bool) -> Any:
    """bf16 autocast on CUDA when ``amp``; a no-op elsewhere (CPU always trains in float32)."""
    if amp and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


class TrainingForward(nn.Module):
    """``(uint8 images (B, 3, S, S), labels (B,), token_perm) -> (loss, logits (B, C))`` for one training step."""

    def __init__(
        self, model: nn.Module, mean: tuple[float, ...], std: tuple[float, ...], label_smoothing: float, amp: bool
    ) -> None:
        super().__init__()
        self.model = model
        self.mean, self.std = mean, std
        self.label_smoothing = label_smoothing
        self.amp = amp

    def forward(self, images: Tensor, labels: Tensor, token_perm: Tensor | None = None) -> tuple[Tensor, Tensor]:
        x = normalize(images, self.mean, self.std)  # (B, 3, S, S) float
        with autocast(images.device, self.amp):
            logits = self.model(x, token_perm=token_perm)  # (B, C)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=self.label_smoothing)
        return loss, logits


def configure_backends(config: TrainConfig, device: torch.device) -> dict[str, Any]:
    """Apply the run's precision settings for ``device``; returns what is in effect (for summary.json)."""
    t = config.train
    cuda = device.type == "cuda"
    if cuda:
        mode = "tf32" if t.tf32 else "ieee"
        if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
            torch.backends.cuda.matmul.fp32_precision = mode
            torch.backends.cudnn.conv.fp32_precision = mode
        else:  # pragma: no cover - older torch
            torch.backends.cuda.matmul.allow_tf32 = t.tf32
            torch.backends.cudnn.allow_tf32 = t.tf32
        torch.backends.cudnn.benchmark = True  # fixed shapes: pick the fastest convolution once
    return {"amp_bf16": t.amp and cuda, "tf32": t.tf32 and cuda, "cudnn_benchmark": cuda}


def build_optimizer(groups: list[dict[str, Any]], optim: OptimConfig, device: torch.device) -> torch.optim.AdamW:
    """AdamW over ``groups``: fused on CUDA (one kernel for every parameter), the default implementation elsewhere."""
    fused = True if device.type == "cuda" else None
    return torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, eps=optim.eps, fused=fused)


def is_fused(optimizer: torch.optim.Optimizer) -> bool:
    return bool(optimizer.defaults.get("fused"))


def wrap_ddp(module: nn.Module, ctx: DistContext) -> nn.Module:
    """``module`` under DDP when there are several processes (buffers are constants: not broadcast each step)."""
    if not ctx.enabled:
        return module
    device_ids = [ctx.device.index] if ctx.device.type == "cuda" else None
    ddp = torch.nn.parallel.DistributedDataParallel
    if "forward_sync_buffers" in inspect.signature(ddp).parameters:  # newer torch: buffers synced once, at init
        return ddp(module, device_ids=device_ids, forward_sync_buffers=False)
    return ddp(module, device_ids=device_ids, broadcast_buffers=False)


class DeviceBatches:
    """``(images, labels)`` of ``loader`` on ``device``; on CUDA batch *k + 1* is copied on a side stream while
    step *k* runs (the loader should pin its memory so that the copy is truly asynchronous)."""

    def __init__(self, loader: Iterable[tuple[Tensor, Tensor]], device: torch.device) -> None:
        self.loader = loader
        self.device = device

    def __len__(self) -> int:
        return len(self.loader)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        if self.device.type != "cuda":
            for images, labels in self.loader:
                yield images.to(self.device), labels.to(self.device)
            return
        stream = torch.cuda.Stream(self.device)
        main = torch.cuda.current_stream(self.device)
        batches = iter(self.loader)

        def copy_next() -> tuple[Tensor, Tensor] | None:
            batch = next(batches, None)
            if batch is None:
                return None
            with torch.cuda.stream(stream):
                return batch[0].to(self.device, non_blocking=True), batch[1].to(self.device, non_blocking=True)

        upcoming = copy_next()
        while upcoming is not None:
            main.wait_stream(stream)  # this batch's copy is done before the step reads it
            images, labels = upcoming
            images.record_stream(main)  # its memory is not reused while the step still reads it
            labels.record_stream(main)
            upcoming = copy_next()
            yield images, labels
