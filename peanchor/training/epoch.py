"""One training epoch, step by step, and the validation pass.

A step keeps no host synchronisation: the loss, the accuracy and a count of non-finite losses are summed on
the device and read once per log interval (``train.log_every`` steps; under DDP one all-reduce of five
numbers and the ranks' stop flags), before every checkpoint and at the end of the epoch. A non-finite loss
therefore stops the run at the next read rather than at once; its weights are never saved (every save is
preceded by a read) and the last good checkpoint stays.

Every random stream of a step is keyed by where the run is (:func:`seed_step`), so that a run resumed at
any step continues exactly as it would have.

Imports: torch; :mod:`peanchor.data`, :mod:`peanchor.core.interrupts`, :mod:`peanchor.core.bars`, :mod:`peanchor.core.errors`,
the rest of :mod:`peanchor.training`.
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from peanchor.core import interrupts
from peanchor.core.bars import progress_bar
from peanchor.data import batch_augment, normalize
from peanchor.core.errors import TrainingDiverged
from peanchor.training.config import TrainConfig
from peanchor.training.distributed import DistContext
from peanchor.training.loaders import TrainData
from peanchor.training.progress import TrainLog
from peanchor.training.state import derive_seed
from peanchor.training.step import DeviceBatches, autocast

__all__ = ["EpochRun", "evaluate", "lr_at", "seed_step", "train_one_epoch"]

# Device accumulator slots: loss × images, correct, images, non-finite losses, NaN losses, steps before the
# first non-finite loss (this process).
LOSS, CORRECT, COUNT, BAD, NAN, GOOD = range(6)


def lr_at(step: int, total_steps: int, warmup_steps: int, base_lr: float, min_lr: float) -> float:
    """Linear warmup to ``base_lr`` over ``warmup_steps``, then cosine decay to ``min_lr`` at ``total_steps``.

    >>> [round(lr_at(s, 10, 2, 1.0, 0.0), 3) for s in (0, 1, 2, 6, 9)]
    [0.5, 1.0, 1.0, 0.5, 0.038]
    """
    if step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    decay_steps = max(1, total_steps - warmup_steps)
    progress = min(1.0, (step - warmup_steps) / decay_steps)
    return min_lr + (base_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def seed_step(seed: int, step: int, rank: int) -> None:
    """Seed torch's global generators (CPU and CUDA: dropout, drop path) for global step ``step`` on ``rank``."""
    torch.manual_seed(derive_seed(seed, "step", step, rank))


@dataclass
class EpochRun:
    """What the steps of a run need: the (compiled, DDP-wrapped) :class:`~peanchor.training.step.TrainingForward`,
    the optimizer, the data, the schedule, and ``save(epoch, step_in_epoch, partial_sums, seconds)`` for mid-epoch
    checkpoints (it writes on rank 0 only)."""

    forward: nn.Module
    optimizer: torch.optim.Optimizer
    data: TrainData
    config: TrainConfig
    ctx: DistContext
    log: TrainLog
    total_steps: int
    warmup_steps: int
    num_patches: int
    save: Callable[[int, int, list[float], float], None]


def _read(acc: torch.Tensor, ctx: DistContext, stop: bool) -> tuple[list[float], bool]:
    """The accumulator summed over ranks, and whether any rank was asked to stop: one host sync."""
    if not ctx.enabled:
        return acc.tolist(), stop
    flags = torch.cat([acc, torch.tensor([float(stop)], dtype=acc.dtype).to(acc.device)])
    ctx.all_reduce_sum(flags)
    values = flags.tolist()
    return values[: len(acc)], values[-1] > 0


def _check_finite(values: list[float], local: torch.Tensor, epoch: int, first: int, last: int, ctx: DistContext,
                  lr: float, kept: str) -> None:  # fmt: skip
    if values[BAD] == 0:
        return
    kind = "nan" if values[NAN] > 0 else "inf"
    where = f"steps {first + 1}-{last}"
    if local[BAD].item() > 0:  # this process saw it: the exact step
        where = f"step {first + int(local[GOOD].item()) + 1}"
    raise TrainingDiverged(
        f"loss became {kind} at epoch {epoch + 1} {where}; lower optim.lr (now {lr:g}) "
        f"or set optim.clip_grad; the last good checkpoint ({kept}) is kept"
    )


def _train_step(run: EpochRun, images: torch.Tensor, labels: torch.Tensor, step: int, lr: float,
                params: list[torch.Tensor], augment_gen: torch.Generator,
                rpt_gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
    """One optimizer step at global ``step`` with learning rate ``lr``; returns the (undetached) loss and logits.

    Every random draw (dropout, augmentation, the RPT permutation) is seeded from ``step``, so a resumed run
    draws exactly what the uninterrupted one would have."""
    o, t, ctx = run.config.optim, run.config.train, run.ctx
    for g in run.optimizer.param_groups:
        g["lr"] = lr * g["lr_mult"]
    seed_step(t.seed, step, ctx.rank)
    if run.data.device_augment != "none":  # (B, 3, S, S) uint8, augmented where it lies
        augment_gen.manual_seed(derive_seed(t.seed, "augment", step, ctx.rank))
        images = batch_augment(images, run.data.device_augment, generator=augment_gen)
    perm = None
    if t.rpt:  # one fresh permutation per step, shared by the batch and the ranks; the PE stays on slots
        rpt_gen.manual_seed(derive_seed(t.seed, "rpt", step))
        perm = torch.randperm(run.num_patches, generator=rpt_gen, device=ctx.device)  # (N,)
    loss, logits = run.forward(images, labels, perm)  # (), (B, C)
    run.optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if o.clip_grad is not None:
        torch.nn.utils.clip_grad_norm_(params, o.clip_grad)
    run.optimizer.step()
    return loss, logits


def _accumulate(acc: torch.Tensor, loss: torch.Tensor, logits: torch.Tensor, labels: torch.Tensor) -> None:
    """Add one step's numbers to the device accumulator ``acc`` (slots LOSS..GOOD), without a host sync."""
    n = labels.numel()
    loss = loss.detach()
    acc[LOSS] += loss.double() * n
    acc[CORRECT] += (logits.detach().argmax(-1) == labels).sum()
    acc[COUNT] += n
    acc[BAD] += ~torch.isfinite(loss)
    acc[NAN] += torch.isnan(loss)
    acc[GOOD] += acc[BAD] == 0


def train_one_epoch(
    run: EpochRun, epoch: int, *, start: int = 0, partial: list[float] | None = None, seconds: float = 0.0,
    kept: str = "", progress: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Steps ``start ..`` of ``epoch``; returns ``train_loss``, ``train_acc``, ``lr`` (last step), ``steps``,
    ``seconds`` (this epoch's training time, earlier sessions included), and ``images`` trained in
    ``session_seconds`` by this session (the throughput).

    ``partial``: the epoch's sums up to ``start`` (from a mid-epoch checkpoint). Raises
    :class:`TrainingDiverged` on a non-finite loss and :class:`~peanchor.core.interrupts.Interrupted` (after a
    checkpoint) when a stop signal arrived.
    """
    c, ctx, device = run.config, run.ctx, run.ctx.device
    o, t = c.optim, c.train
    steps = run.data.steps_per_epoch
    run.data.batches.set_epoch(epoch, start)
    run.forward.train()
    acc = torch.zeros(6, dtype=torch.float64, device=device)
    if partial and ctx.is_main:  # the other ranks' shares were summed into rank 0's at the checkpoint
        acc[:3] = torch.tensor(partial[:3], dtype=torch.float64)
    params = [p for g in run.optimizer.param_groups for p in g["params"]]
    augment_gen = torch.Generator(device=device)
    rpt_gen = torch.Generator(device=device)
    lr, checked, t0 = o.lr, start, time.perf_counter()
    bar = progress_bar(total=steps, initial=start, desc=f"epoch {epoch + 1}", leave=False,
                       show=None if progress and ctx.is_main else False)  # fmt: skip
    try:
        for i, (images, labels) in enumerate(DeviceBatches(run.data.loader, device), start):
            step = epoch * steps + i
            lr = lr_at(step, run.total_steps, run.warmup_steps, o.lr, o.min_lr)
            loss, logits = _train_step(run, images, labels, step, lr, params, augment_gen, rpt_gen)
            _accumulate(acc, loss, logits, labels)
            bar.update(1)

            done = i + 1
            stop = interrupts.requested() is not None
            due_log = done % t.log_every == 0 or done == steps
            due_save = t.checkpoint_every is not None and (step + 1) % t.checkpoint_every == 0 and done < steps
            if not (due_log or due_save or (stop and not ctx.enabled)):
                continue
            values, stop = _read(acc, ctx, stop)
            _check_finite(values, acc, epoch, checked, done, ctx, o.lr, kept)
            checked = done
            if due_log:
                running = values[LOSS] / values[COUNT]
                bar.set_postfix(loss=f"{running:.4f}", lr=f"{lr:.2e}")
                run.log.interval(step + 1, loss=running, lr=lr)
            if (due_save or stop) and done < steps:
                run.save(epoch, done, values[:3], seconds + time.perf_counter() - t0)
                kept = f"epoch {epoch + 1} step {done}"
            if stop and done < steps:
                signum = interrupts.requested() or signal.SIGTERM  # another rank may have received it
                raise interrupts.Interrupted(
                    signum, f"saved at epoch {epoch + 1} step {done}/{steps}; rerun the same command to resume"
                )
    finally:
        bar.close()
    elapsed = time.perf_counter() - t0
    ctx.all_reduce_sum(acc)
    values = acc.tolist()
    loss_sum, correct, count = values[LOSS], values[CORRECT], values[COUNT]
    return {
        "train_loss": loss_sum / count, "train_acc": correct / count, "lr": lr, "steps": steps,
        "seconds": seconds + elapsed, "images": (steps - start) * t.batch_size, "session_seconds": elapsed,
    }  # fmt: skip


@torch.no_grad()
def evaluate(
    model: nn.Module,
    loader: DataLoader,
    *,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    device: torch.device,
    amp: bool = False,
    ctx: DistContext | None = None,
) -> dict[str, float]:
    """Clean top-1 accuracy and mean cross-entropy over ``loader`` (summed over DDP ranks)."""
    was_training = model.training
    model.eval()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # correct, loss sum, count
    for images, labels in DeviceBatches(loader, device):
        with autocast(device, amp):
            logits = model(normalize(images, mean, std))  # (B, C)
        logits = logits.float()
        totals[0] += (logits.argmax(-1) == labels).sum()
        totals[1] += F.cross_entropy(logits, labels, reduction="sum")
        totals[2] += labels.numel()
    if ctx is not None:
        ctx.all_reduce_sum(totals)
    model.train(was_training)
    correct, loss_sum, count = totals.tolist()
    return {"acc": correct / max(count, 1), "loss": loss_sum / max(count, 1), "count": int(count)}
