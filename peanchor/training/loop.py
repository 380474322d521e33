"""The training loop: AdamW + warmup/cosine, label smoothing, optional RPT, resumable run directories.

``train(config, out_dir)`` leaves a self-describing run directory::

    config.yaml          the resolved TrainConfig
    metrics.csv          one row per epoch: epoch, train_loss, train_acc, val_acc, lr, seconds
    checkpoint/          resume state, replaced atomically after every epoch (see state.py)
    model.safetensors    final weights + model_args (load with peanchor.load_model)
    summary.json         written last: its presence marks the run as finished

Rerunning the same config into the same directory resumes from the last completed epoch and ends
with bit-identical weights on CPU, because every random stream (torch global RNG for dropout and
augmentation, the shuffling generator, the RPT generator) is reseeded from ``(seed, epoch, rank)``
at the start of each epoch. Under ``torchrun`` the model is wrapped in DDP, each process sees
``batch_size / world_size`` images per step, metrics are all-reduced, and rank 0 alone writes.
The run directory's files and checks are :mod:`peanchor.training.run_dir`.

Imports: :mod:`peanchor.models`, :mod:`peanchor.data`, :mod:`peanchor.checkpoint`, the rest of
:mod:`peanchor.training`.
"""

from __future__ import annotations

import contextlib
import math
import random
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset
from tqdm.auto import tqdm

from peanchor import fileio
from peanchor.checkpoint import MODEL_FILE, save_model
from peanchor.data import build_datasets, normalize
from peanchor.errors import ConfigError, TrainingDiverged
from peanchor.interventions import random_permutation
from peanchor.models import create_model
from peanchor.training.config import TrainConfig, to_dict, to_yaml, validate
from peanchor.training.distributed import DistContext, main_first, setup_distributed
from peanchor.training.run_dir import (
    CHECKPOINT_DIR,
    CONFIG_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    check_run_dir,
    read_summary,
    run_summary,
    write_metrics,
)
from peanchor.training.state import STATE_FILE, TrainState, derive_seed, load_train_state, save_train_state


# ----------------------------------------------------------------------------------------------
# Pieces (each usable on its own)


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


def param_groups(
    model: nn.Module, weight_decay: float, pe_lr_mult: float, pe_weight_decay: float
) -> list[dict[str, Any]]:
    """AdamW groups: decayed weights; no decay on norms, biases and the CLS token; PE parameters apart.

    PE parameters are everything under ``model.pe``; they get ``pe_lr_mult`` × lr and ``pe_weight_decay``.
    Each group carries ``lr_mult`` and ``name`` for the scheduler and the logs.
    """
    decay, no_decay, pe = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.startswith("pe."):
            pe.append(p)
        elif p.ndim < 2 or name.endswith(".bias") or name == "cls_token" or ".norm" in name or name.startswith("norm"):
            no_decay.append(p)
        else:
            decay.append(p)
    groups = [
        {"params": decay, "weight_decay": weight_decay, "lr_mult": 1.0, "name": "decay"},
        {"params": no_decay, "weight_decay": 0.0, "lr_mult": 1.0, "name": "no_decay"},
        {"params": pe, "weight_decay": pe_weight_decay, "lr_mult": pe_lr_mult, "name": "pe"},
    ]
    return [g for g in groups if g["params"]]


def build_model(config: TrainConfig, num_classes: int, img_size: int) -> nn.Module:
    """The configured ViT; a bad name or option is a :class:`ConfigError`."""
    m = config.model
    try:
        return create_model(
            m.name,
            pe=m.pe,
            num_classes=num_classes,
            img_size=img_size,
            patch_size=m.patch_size,
            pe_kwargs=dict(m.pe_kwargs),
            **m.overrides,
        )
    except (ValueError, TypeError) as e:
        raise ConfigError(f"cannot build model {m.name!r} with pe {m.pe!r}: {e}") from e


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
    for images, labels in loader:
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        with _autocast(device, amp):
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


def _autocast(device: torch.device, amp: bool) -> Any:
    if amp and device.type == "cuda":
        return torch.autocast(device_type="cuda", dtype=torch.bfloat16)
    return nullcontext()


def _seed_epoch(seed: int, epoch: int, rank: int, generators: dict[str, torch.Generator]) -> None:
    """Reseed every random stream for ``epoch``: the run is a pure function of (config, epoch)."""
    s = derive_seed(seed, "torch", epoch, rank)
    torch.manual_seed(s)  # dropout, drop path, in-process augmentation (CUDA too)
    random.seed(s)
    np.random.seed(s % (1 << 32))
    for name, gen in generators.items():
        # Shuffling/worker seeds differ per rank; the RPT permutation is shared by all ranks.
        gen.manual_seed(derive_seed(seed, name, epoch, rank if name == "loader" else 0))


def _log(ctx: DistContext, message: str) -> None:
    if ctx.is_main:
        tqdm.write(f"peanchor: {message}", file=sys.stderr)


# ----------------------------------------------------------------------------------------------
# Data loaders


def _train_loader(
    dataset: Dataset, config: TrainConfig, ctx: DistContext, generator: torch.Generator
) -> tuple[DataLoader, DistributedSampler | None]:
    t = config.train
    if t.batch_size % ctx.world_size:
        raise ConfigError(
            f"train.batch_size={t.batch_size} must be divisible by the number of processes ({ctx.world_size})"
        )
    per_rank = t.batch_size // ctx.world_size
    sampler = None
    if ctx.enabled:
        sampler = DistributedSampler(
            dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=t.seed, drop_last=True
        )
    loader = DataLoader(
        dataset,
        batch_size=per_rank,
        shuffle=sampler is None,
        sampler=sampler,
        drop_last=True,
        num_workers=t.num_workers,
        pin_memory=ctx.device.type == "cuda",
        generator=generator,
        # Fresh workers every epoch: their seeds then come from the per-epoch generator (exact resume).
        persistent_workers=False,
    )
    if len(loader) == 0:
        raise ConfigError(
            f"the training set has {len(dataset)} images, fewer than one batch of {t.batch_size}: "
            "lower train.batch_size or raise data.train_size"
        )
    return loader, sampler


def _val_loader(dataset: Dataset, config: TrainConfig, ctx: DistContext) -> DataLoader:
    if ctx.enabled:  # an exact shard per rank (no padding, unlike DistributedSampler)
        dataset = Subset(dataset, range(ctx.rank, len(dataset), ctx.world_size))
    return DataLoader(
        dataset,
        batch_size=config.train.eval_batch_size,
        shuffle=False,
        num_workers=config.train.num_workers,
        pin_memory=ctx.device.type == "cuda",
    )


# ----------------------------------------------------------------------------------------------
# One epoch


def train_one_epoch(
    model: nn.Module,
    loader: DataLoader,
    optimizer: torch.optim.Optimizer,
    *,
    config: TrainConfig,
    epoch: int,
    first_step: int,
    total_steps: int,
    warmup_steps: int,
    num_patches: int,
    mean: tuple[float, ...],
    std: tuple[float, ...],
    rpt_generator: torch.Generator,
    ctx: DistContext,
    progress: bool,
    tracker: Any = None,
) -> dict[str, float]:
    """One pass over ``loader``; returns ``train_loss``, ``train_acc``, ``lr`` (last step), ``steps``, ``seconds``.

    ``tracker`` (e.g. :class:`peanchor.tracking.TrainingLog`) gets ``step(step, loss=, lr=)`` every
    ``train.log_every`` steps: the running mean loss of the epoch so far, on this process.

    Raises :class:`TrainingDiverged` at the first non-finite loss (before the optimizer steps on it).
    """
    o, device = config.optim, ctx.device
    amp = config.train.amp and device.type == "cuda"
    model.train()
    totals = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, correct, count
    params = [p for g in optimizer.param_groups for p in g["params"]]
    lr = o.lr
    start = time.perf_counter()
    bar = tqdm(
        total=len(loader), desc=f"epoch {epoch + 1}", leave=False, disable=None if progress and ctx.is_main else True
    )
    for i, (images, labels) in enumerate(loader):
        step = first_step + i
        lr = lr_at(step, total_steps, warmup_steps, o.lr, o.min_lr)
        for g in optimizer.param_groups:
            g["lr"] = lr * g["lr_mult"]
        images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
        x = normalize(images, mean, std)  # (B, 3, S, S) float
        # RPT: one fresh permutation per step, shared by the batch; the PE stays on the slots.
        perm = random_permutation(num_patches, generator=rpt_generator).to(device) if config.train.rpt else None
        with _autocast(device, amp):
            logits = model(x, token_perm=perm)  # (B, C)
        loss = F.cross_entropy(logits.float(), labels, label_smoothing=o.label_smoothing)
        check = loss.detach().clone()
        if ctx.enabled:  # every rank must stop at the same step, so decide on the mean loss
            ctx.all_reduce_sum(check)
        if not torch.isfinite(check).item():
            kind = "nan" if torch.isnan(check).item() else "inf"
            bar.close()
            raise TrainingDiverged(
                f"loss became {kind} at epoch {epoch + 1} step {i + 1}; lower optim.lr (now {o.lr:g}) "
                f"or set optim.clip_grad; the last good checkpoint (epoch {epoch}) is kept"
            )
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if o.clip_grad is not None:
            torch.nn.utils.clip_grad_norm_(params, o.clip_grad)
        optimizer.step()
        n = labels.numel()
        totals[0] += loss.detach().double() * n
        totals[1] += (logits.detach().argmax(-1) == labels).sum()
        totals[2] += n
        bar.update(1)
        if (i + 1) % config.train.log_every == 0 or i + 1 == len(loader):
            running = totals[0].item() / totals[2].item()
            bar.set_postfix(loss=f"{running:.4f}", lr=f"{lr:.2e}")
            if tracker is not None:
                tracker.step(step + 1, loss=running, lr=lr)
    bar.close()
    seconds = time.perf_counter() - start
    ctx.all_reduce_sum(totals)
    loss_sum, correct, count = totals.tolist()
    return {"train_loss": loss_sum / count, "train_acc": correct / count, "lr": lr, "steps": len(loader),
            "seconds": seconds}  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The run


def train(
    config: TrainConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    max_epochs: int | None = None,
    tracker: Any = None,
) -> dict[str, Any]:
    """Train ``config`` into ``out_dir`` (resuming it if it holds the same config) and return the summary.

    ``max_epochs`` stops after that many completed epochs without finishing the run (the returned
    dict then has ``status == "stopped"``); rerunning continues it. Rerunning a finished run does
    nothing and returns its summary with ``status == "already_finished"``. ``tracker`` (e.g.
    :class:`peanchor.tracking.TrainingLog`, rank 0 only) is told every ``log_every`` steps and every epoch.
    """
    validate(config)
    out_dir = Path(out_dir)
    ctx = setup_distributed(config.train.device)
    try:
        return _train(config, out_dir, ctx, progress=progress, max_epochs=max_epochs,
                      tracker=tracker if ctx.is_main else None)  # fmt: skip
    finally:
        ctx.close()


def _train(
    config: TrainConfig, out_dir: Path, ctx: DistContext, *, progress: bool, max_epochs: int | None, tracker: Any
) -> dict[str, Any]:
    # Refuse a conflicting directory before touching it (not even the lock file).
    main_first(ctx, lambda: check_run_dir(config, out_dir), others=False)
    created = not out_dir.exists()
    lock = fileio.RunLock(out_dir)  # held by rank 0 only; a second process is refused
    main_first(ctx, lock.acquire, others=False)
    try:
        return _train_locked(config, out_dir, ctx, progress=progress, max_epochs=max_epochs, tracker=tracker)
    finally:
        lock.release()
        if created and ctx.is_main:
            # A run that failed before writing anything (bad data root, ...) leaves no empty directory.
            with contextlib.suppress(OSError):
                out_dir.rmdir()


def _train_locked(
    config: TrainConfig, out_dir: Path, ctx: DistContext, *, progress: bool, max_epochs: int | None, tracker: Any
) -> dict[str, Any]:
    t = config.train

    def prepare() -> int:
        # Re-check under the lock: another process may have changed the directory meanwhile.
        return {"fresh": 0, "resume": 1, "finished": 2}[check_run_dir(config, out_dir)]

    code = main_first(ctx, prepare, others=False)
    (code,) = ctx.broadcast_ints([code if code is not None else 0])
    if code == 2:
        summary = read_summary(out_dir) if ctx.is_main else {}
        _log(ctx, f"{out_dir} is already finished (val acc {summary.get('val_acc')}); nothing to do")
        summary["status"] = "already_finished"
        return summary

    # Data: rank 0 first (it may generate a dataset cache), then the others read it.
    built = main_first(ctx, lambda: build_datasets(config.data))
    assert built is not None
    train_ds, val_ds, info = built

    torch.manual_seed(derive_seed(t.seed, "init"))  # the same initial weights on every rank
    model = build_model(config, info.num_classes, info.img_size).to(ctx.device)
    groups = param_groups(model, config.optim.weight_decay, config.optim.pe_lr_mult, config.optim.pe_weight_decay)
    optimizer = torch.optim.AdamW(groups, lr=config.optim.lr, betas=config.optim.betas, eps=config.optim.eps)

    state = TrainState(world_size=ctx.world_size)
    state_path = out_dir / CHECKPOINT_DIR / STATE_FILE
    if code == 1:
        state = load_train_state(state_path, model, optimizer)
        if state.world_size != ctx.world_size:
            _log(ctx, f"resuming with {ctx.world_size} processes instead of {state.world_size}: not bit-identical")
        state.world_size = ctx.world_size
        _log(ctx, f"resuming {out_dir} after epoch {state.epoch}/{t.epochs}")

    fwd: nn.Module = model
    if ctx.enabled:
        fwd = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None
        )
    if t.compile:
        fwd = torch.compile(fwd)

    generators = {"loader": torch.Generator(), "rpt": torch.Generator()}
    train_loader, sampler = _train_loader(train_ds, config, ctx, generators["loader"])
    val_loader = _val_loader(val_ds, config, ctx)
    steps_per_epoch = len(train_loader)
    total_steps = steps_per_epoch * t.epochs
    warmup_steps = min(total_steps, round(config.optim.warmup_epochs * steps_per_epoch))
    mean, std = tuple(info.mean), tuple(info.std)
    amp = t.amp and ctx.device.type == "cuda"

    if ctx.is_main and not (out_dir / CONFIG_FILE).exists():
        # Written once data and model are known to build, so a typo never pins a directory to a bad config.
        fileio.write_text(out_dir / CONFIG_FILE, to_yaml(config))

    stop_at = t.epochs if max_epochs is None else min(t.epochs, max_epochs)
    epochs_bar = tqdm(
        total=t.epochs, initial=state.epoch, desc="epochs", disable=None if progress and ctx.is_main else True
    )
    for epoch in range(state.epoch, stop_at):
        start = time.perf_counter()
        _seed_epoch(t.seed, epoch, ctx.rank, generators)
        if sampler is not None:
            sampler.set_epoch(epoch)
        stats = train_one_epoch(
            fwd, train_loader, optimizer, config=config, epoch=epoch, first_step=epoch * steps_per_epoch,
            total_steps=total_steps, warmup_steps=warmup_steps, num_patches=model.num_patches, mean=mean, std=std,
            rpt_generator=generators["rpt"], ctx=ctx, progress=progress, tracker=tracker,
        )  # fmt: skip
        val = evaluate(model, val_loader, mean=mean, std=std, device=ctx.device, amp=amp, ctx=ctx)
        row = {
            "epoch": epoch + 1,
            "train_loss": stats["train_loss"],
            "train_acc": stats["train_acc"],
            "val_acc": val["acc"],
            "val_loss": val["loss"],
            "lr": stats["lr"],
            "seconds": time.perf_counter() - start,
        }
        state.epoch, state.global_step = epoch + 1, (epoch + 1) * steps_per_epoch
        state.history.append(row)
        if ctx.is_main:
            # State first: metrics.csv is always rebuilt from the state's history.
            save_train_state(state_path, model, optimizer, state, to_dict(config))
            write_metrics(out_dir / METRICS_FILE, state.history)
        if tracker is not None:
            tracker.epoch(row, step=state.global_step, images=stats["steps"] * t.batch_size, seconds=stats["seconds"])
        epochs_bar.update(1)
        epochs_bar.set_postfix(loss=f"{row['train_loss']:.4f}", val_acc=f"{row['val_acc']:.4f}")
    epochs_bar.close()

    if state.epoch < t.epochs:
        ctx.barrier()
        _log(ctx, f"stopped after epoch {state.epoch}/{t.epochs}; rerun the same command to continue")
        return {"status": "stopped", "epochs_done": state.epoch, "epochs": t.epochs, "run_dir": str(out_dir)}

    summary = run_summary(config, out_dir, model, info, state, ctx, len(train_ds), len(val_ds))
    if ctx.is_main:
        if state.history:
            write_metrics(out_dir / METRICS_FILE, state.history)
        save_model(model, out_dir / MODEL_FILE, extra_metadata={
            "config": to_dict(config), "condition": config.condition, "val_acc": summary["val_acc"],
            "epochs": t.epochs,
        })  # fmt: skip
        fileio.write_json(out_dir / SUMMARY_FILE, summary)  # last: marks the run finished
    ctx.barrier()
    return summary


__all__ = [
    "build_model",
    "evaluate",
    "lr_at",
    "param_groups",
    "train",
    "train_one_epoch",
]
