"""The training loop: AdamW + warmup/cosine, label smoothing, optional RPT, resumable run directories.

``train(config, out_dir)`` leaves a self-describing run directory (its files are listed in
:mod:`peanchor.training.run_dir`).

Rerunning the same config into the same directory resumes from the last checkpoint, mid-epoch included,
and ends with bit-identical weights on CPU, because every random stream is a pure function of the seed and
of the step, epoch or sample it serves (see :mod:`peanchor.training.sampling` and
:mod:`peanchor.training.epoch`), whatever the number of DataLoader workers. SIGTERM and SIGINT (Slurm,
torchrun, Ctrl-C) end the current step, write the resume state, release the lock and raise
:class:`~peanchor.core.interrupts.Interrupted` (exit code 143 / 130 from the CLI).

Under ``torchrun`` the model is wrapped in DDP, each process sees ``batch_size / world_size`` images per step
(the global batch is the same images whatever the world size), metrics are all-reduced, and rank 0 alone
writes. On CUDA the step runs with fused AdamW, TF32, bf16 autocast, pinned prefetching loaders with
persistent workers and, for array datasets, augmentation on the device batch (:mod:`peanchor.training.step`).

Imports: :mod:`peanchor.models`, :mod:`peanchor.data`, :mod:`peanchor.checkpoint.files`, :mod:`peanchor.core.fileio`,
:mod:`peanchor.core.interrupts`, :mod:`peanchor.core.bars`, the rest of :mod:`peanchor.training`.
"""

from __future__ import annotations

import contextlib
import signal
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from peanchor.core import fileio, interrupts
from peanchor.core.bars import progress_bar
from peanchor.checkpoint.files import MODEL_FILE, save_model
from peanchor.data import DataInfo, build_datasets
from peanchor.core.errors import ConfigError, RunDirError
from peanchor.models import create_model
from peanchor.training.config import TrainConfig, to_dict, to_yaml, validate
from peanchor.training.distributed import DistContext, main_first, setup_distributed
from peanchor.training.epoch import EpochRun, evaluate, lr_at, train_one_epoch
from peanchor.training.loaders import TrainData, close_loader, train_data, val_loader
from peanchor.training.progress import TrainHook, TrainLog
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
from peanchor.training.step import TrainingForward, build_optimizer, configure_backends, is_fused, wrap_ddp


# ----------------------------------------------------------------------------------------------
# Pieces (each usable on its own)


def param_groups(
    model: nn.Module, weight_decay: float, pe_lr_mult: float, pe_weight_decay: float, decay_norms_biases: bool = False
) -> list[dict[str, Any]]:
    """AdamW groups: decayed weights; norms, biases and the CLS token without decay (unless ``decay_norms_biases``:
    then they are decayed like every other weight, a plain AdamW); PE parameters apart.

    PE parameters are everything under ``model.pe``; they get ``pe_lr_mult`` × lr and ``pe_weight_decay``.
    Each group carries ``lr_mult`` and ``name`` for the scheduler and the logs.
    """
    decay, no_decay, pe = [], [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if name.startswith("pe."):
            pe.append(p)
        elif not decay_norms_biases and (
            p.ndim < 2 or name.endswith(".bias") or name == "cls_token" or ".norm" in name or name.startswith("norm")
        ):
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


# ----------------------------------------------------------------------------------------------
# The run


def train(
    config: TrainConfig,
    out_dir: str | Path,
    *,
    progress: bool = True,
    max_epochs: int | None = None,
    tracker: TrainHook | None = None,
    hooks: Sequence[TrainHook] = (),
) -> dict[str, Any]:
    """Train ``config`` into ``out_dir`` (resuming it if it holds the same config) and return the summary.

    ``max_epochs`` stops after that many completed epochs without finishing the run (the returned
    dict then has ``status == "stopped"``); rerunning continues it. Rerunning a finished run does
    nothing and returns its summary with ``status == "already_finished"``. ``tracker`` (e.g.
    :class:`peanchor.core.tracking.TrainingLog`) and ``hooks`` receive the numbers every log interval and every
    epoch, on rank 0 (:class:`~peanchor.training.progress.TrainHook`).
    """
    validate(config)
    out_dir = Path(out_dir)
    ctx = setup_distributed(config.train.device)
    hooks = [h for h in (tracker, *hooks) if h is not None]
    try:
        with interrupts.handling():
            return _train(config, out_dir, ctx, progress=progress, max_epochs=max_epochs, hooks=hooks)
    finally:
        ctx.close()


def _train(
    config: TrainConfig, out_dir: Path, ctx: DistContext, *, progress: bool, max_epochs: int | None,
    hooks: Sequence[TrainHook],
) -> dict[str, Any]:  # fmt: skip
    # Refuse a conflicting directory before touching it (not even the lock file).
    main_first(ctx, lambda: check_run_dir(config, out_dir), others=False)
    created = not out_dir.exists()
    lock = fileio.RunLock(out_dir)  # held (and refreshed) by rank 0 only; a second process is refused
    main_first(ctx, lock.acquire, others=False)
    try:
        return _train_locked(config, out_dir, ctx, progress=progress, max_epochs=max_epochs, hooks=hooks)
    finally:
        lock.release()
        if created and ctx.is_main:
            # A run that failed before writing anything (bad data root, ...) leaves no empty directory.
            with contextlib.suppress(OSError):
                out_dir.rmdir()


def _resume_state(config: TrainConfig, out_dir: Path, model: nn.Module, optimizer: torch.optim.Optimizer,
                  ctx: DistContext, log: TrainLog, steps_per_epoch: int) -> TrainState:  # fmt: skip
    state = load_train_state(out_dir / CHECKPOINT_DIR / STATE_FILE, model, optimizer)
    if state.device_type and state.device_type != ctx.device.type:
        raise RunDirError(
            f"{out_dir} was trained on {state.device_type} and this run would continue it on {ctx.device.type}; "
            f"a run stays on one device type (a CPU run is bit-exact only on CPU): use --device "
            f"{state.device_type}, or another --out"
        )
    if state.step_in_epoch and state.steps_per_epoch != steps_per_epoch:
        raise RunDirError(
            f"{out_dir} stopped at step {state.step_in_epoch} of an epoch of {state.steps_per_epoch} steps, but "
            f"this config has {steps_per_epoch} steps per epoch; use the run's own settings to resume it"
        )
    if state.world_size != ctx.world_size:
        log.message(f"resuming with {ctx.world_size} processes instead of {state.world_size}: the same images per "
                    "step, but dropout and augmentation draws differ per process, so not bit-identical")  # fmt: skip
    where = f"step {state.step_in_epoch}/{steps_per_epoch} of epoch {state.epoch + 1}" if state.step_in_epoch else (
        f"epoch {state.epoch}/{config.train.epochs}")  # fmt: skip
    log.message(f"resuming {out_dir} after {where}")
    state.world_size = ctx.world_size
    return state


def _train_locked(
    config: TrainConfig, out_dir: Path, ctx: DistContext, *, progress: bool, max_epochs: int | None,
    hooks: Sequence[TrainHook],
) -> dict[str, Any]:  # fmt: skip
    t = config.train
    log = TrainLog(out_dir, ctx, t.epochs, hooks)

    def prepare() -> int:
        # Re-check under the lock: another process may have changed the directory meanwhile.
        return {"fresh": 0, "resume": 1, "finished": 2}[check_run_dir(config, out_dir)]

    code = main_first(ctx, prepare, others=False)
    (code,) = ctx.broadcast_ints([code if code is not None else 0])
    if code == 2:
        summary = read_summary(out_dir) if ctx.is_main else {}
        log.message(f"is already finished (val acc {summary.get('val_acc')}); nothing to do")
        summary["status"] = "already_finished"
        return summary

    # Data: rank 0 first (it may generate a dataset cache), then the others read it.
    built = main_first(ctx, lambda: build_datasets(config.data))
    assert built is not None
    train_ds, val_ds, info = built
    data = train_data(train_ds, config, ctx)
    val_data = val_loader(val_ds, config, ctx)
    try:
        return _run(config, out_dir, ctx, log, code, data, val_data, val_ds, info, progress, max_epochs)
    finally:
        close_loader(data.loader)
        close_loader(val_data)


def _model_and_optimizer(
    config: TrainConfig, ctx: DistContext, info: DataInfo
) -> tuple[nn.Module, torch.optim.Optimizer, dict[str, Any]]:
    """The model (the same initial weights on every rank), its AdamW and the backend settings (``speed``)."""
    torch.manual_seed(derive_seed(config.train.seed, "init"))
    model = build_model(config, info.num_classes, info.img_size).to(ctx.device)
    o = config.optim
    groups = param_groups(model, o.weight_decay, o.pe_lr_mult, o.pe_weight_decay, o.decay_norms_biases)
    speed = configure_backends(config, ctx.device)
    optimizer = build_optimizer(groups, o, ctx.device)
    return model, optimizer, speed


def _training_forward(config: TrainConfig, model: nn.Module, info: DataInfo, amp: bool, ctx: DistContext) -> nn.Module:
    """The step's forward (normalise → model → loss), compiled if asked, DDP-wrapped under torchrun."""
    forward: nn.Module = TrainingForward(model, tuple(info.mean), tuple(info.std), config.optim.label_smoothing, amp)
    if config.train.compile:
        forward = torch.compile(forward)  # the whole step's forward; AOTAutograd compiles its backward
    return wrap_ddp(forward, ctx)


def _open_run_dir(config: TrainConfig, out_dir: Path, ctx: DistContext, log: TrainLog, code: int,
                  steps_per_epoch: int) -> None:  # fmt: skip
    """Write the resolved config (once) and start the log of a fresh run."""
    if ctx.is_main and not (out_dir / CONFIG_FILE).exists():
        # Written once data and model are known to build, so a typo never pins a directory to a bad config.
        fileio.write_text(out_dir / CONFIG_FILE, to_yaml(config))
    log.open_file()
    if code == 0:
        log.message(f"training {config.condition} ({config.model.name}, {config.train.epochs} epochs of "
                    f"{steps_per_epoch} steps) on {ctx.device}" + (f" × {ctx.world_size}" if ctx.enabled else ""),
                    echo=False, hold=True)  # fmt: skip


def _epoch_row(epoch: int, stats: dict[str, Any], val: dict[str, float], eval_seconds: float) -> dict[str, Any]:
    """One line of metrics.csv: the epoch's training numbers, its validation and its time."""
    return {
        "epoch": epoch + 1,
        "train_loss": stats["train_loss"],
        "train_acc": stats["train_acc"],
        "val_acc": val["acc"],
        "val_loss": val["loss"],
        "lr": stats["lr"],
        "seconds": stats["seconds"] + eval_seconds,
    }


def _stop_if_asked(ctx: DistContext, epochs_done: int, epochs: int) -> None:
    """Raise :class:`~peanchor.core.interrupts.Interrupted` after a saved epoch when a stop signal arrived (any rank)."""
    signum = interrupts.requested()
    if ctx.enabled and not ctx.all_agree(signum is None):  # every rank takes part, and all stop together
        signum = signum or signal.SIGTERM
    if signum and epochs_done < epochs:
        raise interrupts.Interrupted(signum, f"saved after epoch {epochs_done}/{epochs}; rerun the same command "
                                             "to resume")  # fmt: skip


def _finish(
    config: TrainConfig, out_dir: Path, ctx: DistContext, log: TrainLog, model: nn.Module, state: TrainState,
    info: DataInfo, n_train: int, n_val: int, speed: dict[str, Any],
) -> dict[str, Any]:  # fmt: skip
    """Write the final model and summary.json (last: it marks the run finished); return the summary."""
    summary = run_summary(config, out_dir, model, info, state, ctx, n_train, n_val, speed)
    if ctx.is_main:
        if state.history:
            write_metrics(out_dir / METRICS_FILE, state.history)
        save_model(model, out_dir / MODEL_FILE, extra_metadata={
            "config": to_dict(config), "condition": config.condition, "val_acc": summary["val_acc"],
            "epochs": config.train.epochs,
        })  # fmt: skip
        fileio.write_json(out_dir / SUMMARY_FILE, summary)  # last: marks the run finished
        log.message(f"finished: val acc {summary['val_acc']:.4f}")
    ctx.barrier()
    return summary


def _run(
    config: TrainConfig, out_dir: Path, ctx: DistContext, log: TrainLog, code: int, data: TrainData,
    val_data: DataLoader, val_ds: Dataset, info: DataInfo, progress: bool, max_epochs: int | None,
) -> dict[str, Any]:  # fmt: skip
    """Model, optimizer, resume state and the epochs of a run whose data is built (``code``: 0 fresh, 1 resume)."""
    t, o = config.train, config.optim
    model, optimizer, speed = _model_and_optimizer(config, ctx, info)
    steps_per_epoch = data.steps_per_epoch
    state = TrainState(world_size=ctx.world_size, steps_per_epoch=steps_per_epoch, device_type=ctx.device.type)
    if code == 1:
        log.open_file()  # the run directory is a run's already
        state = _resume_state(config, out_dir, model, optimizer, ctx, log, steps_per_epoch)
    state.steps_per_epoch, state.device_type = steps_per_epoch, ctx.device.type
    state_path = out_dir / CHECKPOINT_DIR / STATE_FILE
    mean, std, amp = tuple(info.mean), tuple(info.std), speed["amp_bf16"]
    forward = _training_forward(config, model, info, amp, ctx)
    _open_run_dir(config, out_dir, ctx, log, code, steps_per_epoch)
    speed.update(fused_adamw=is_fused(optimizer), compile=t.compile, augment_on_device=data.device_augment,
                 num_workers=t.num_workers, persistent_workers=t.num_workers > 0,
                 pin_memory=ctx.device.type == "cuda", prefetch="cuda side stream" if ctx.device.type == "cuda"
                 else "none")  # fmt: skip

    def save(epoch: int, step_in_epoch: int, partial: list[float], seconds: float) -> None:
        if ctx.is_main:
            mid = TrainState(
                epoch=epoch, global_step=epoch * steps_per_epoch + step_in_epoch, history=state.history,
                world_size=ctx.world_size, step_in_epoch=step_in_epoch, steps_per_epoch=steps_per_epoch,
                partial=partial, partial_seconds=seconds, device_type=ctx.device.type,
            )  # fmt: skip
            save_train_state(state_path, model, optimizer, mid, to_dict(config))
            log.message(f"checkpoint at epoch {epoch + 1} step {step_in_epoch}/{steps_per_epoch}")

    total_steps = steps_per_epoch * t.epochs
    run = EpochRun(
        forward=forward, optimizer=optimizer, data=data, config=config, ctx=ctx, log=log, total_steps=total_steps,
        warmup_steps=min(total_steps, round(o.warmup_epochs * steps_per_epoch)), num_patches=model.num_patches,
        save=save,
    )  # fmt: skip
    stop_at = t.epochs if max_epochs is None else min(t.epochs, max_epochs)
    epochs_bar = progress_bar(total=t.epochs, initial=state.epoch, desc="epochs",
                              show=None if progress and ctx.is_main else False)  # fmt: skip
    with interrupts.deferred(), contextlib.closing(epochs_bar):
        for epoch in range(state.epoch, stop_at):
            resumed = state.step_in_epoch if epoch == state.epoch else 0
            kept = f"epoch {state.epoch}" + (f", step {state.step_in_epoch}" if state.step_in_epoch else "")
            stats = train_one_epoch(
                run, epoch, start=resumed, partial=state.partial if resumed else None,
                seconds=state.partial_seconds if resumed else 0.0, kept=kept, progress=progress,
            )  # fmt: skip
            start = time.perf_counter()
            val = evaluate(model, val_data, mean=mean, std=std, device=ctx.device, amp=amp, ctx=ctx)
            row = _epoch_row(epoch, stats, val, time.perf_counter() - start)
            state = TrainState(
                epoch=epoch + 1, global_step=(epoch + 1) * steps_per_epoch, history=[*state.history, row],
                world_size=ctx.world_size, steps_per_epoch=steps_per_epoch, device_type=ctx.device.type,
            )  # fmt: skip
            if ctx.is_main:
                # State first: metrics.csv is always rebuilt from the state's history.
                save_train_state(state_path, model, optimizer, state, to_dict(config))
                write_metrics(out_dir / METRICS_FILE, state.history)
            log.epoch(row, step=state.global_step, images=stats["images"], seconds=stats["session_seconds"],
                      eta_s=(t.epochs - epoch - 1) * row["seconds"])  # fmt: skip
            epochs_bar.update(1)
            epochs_bar.set_postfix(loss=f"{row['train_loss']:.4f}", val_acc=f"{row['val_acc']:.4f}")
            _stop_if_asked(ctx, state.epoch, t.epochs)

    if state.epoch < t.epochs:
        ctx.barrier()
        log.message(f"stopped after epoch {state.epoch}/{t.epochs}; rerun the same command to continue")
        return {"status": "stopped", "epochs_done": state.epoch, "epochs": t.epochs, "run_dir": str(out_dir)}
    n_val = len(val_ds)  # type: ignore[arg-type]
    return _finish(config, out_dir, ctx, log, model, state, info, data.size, n_val, speed)


__all__ = [
    "build_model",
    "evaluate",
    "lr_at",
    "param_groups",
    "train",
    "train_one_epoch",
]
