"""What a training run tells the people and tools watching it.

* One line per epoch on stderr (rank 0), with or without a terminal, so a Slurm log shows progress::

      peanchor: train-paper-rope-s0 epoch 3/60 loss 4.1035 acc 0.1290 val_acc 0.1512 lr 6.00e-04 1,873 img/s eta 1:41:07

  and the same lines, time-stamped, appended to ``RUN/train.log`` (with the run's start, resume and stop
  messages), which survives requeues and the terminal.
* Hooks (:class:`TrainHook`): every log interval (``train.log_every`` steps, when the running loss is read
  anyway) and every epoch, other loggers get the same numbers: :class:`peanchor.core.tracking.TrainingLog`
  (TensorBoard, ``train(..., tracker=...)``), or any object with these two methods (``hooks=[...]``).

Imports: :mod:`peanchor.core.fileio`, :mod:`peanchor.core.bars` (whether this is a notebook), :mod:`peanchor.training.distributed`.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Protocol

from tqdm.auto import tqdm

from peanchor.core import fileio
from peanchor.core.bars import in_jupyter
from peanchor.training.distributed import DistContext

__all__ = ["LOG_FILE", "TrainHook", "TrainLog", "format_duration"]

LOG_FILE = "train.log"


class TrainHook(Protocol):
    """Receives the run's numbers on rank 0 (the interface of :class:`peanchor.core.tracking.TrainingLog`)."""

    def step(self, step: int, *, loss: float, lr: float) -> None:
        """Every ``train.log_every`` steps (``step``: optimisation steps done): the epoch's running mean loss so
        far (over every process) and the learning rate."""

    def epoch(self, row: Mapping[str, Any], *, step: int, images: int, seconds: float) -> None:
        """After each epoch: its metrics.csv row (``epoch``, ``train_loss``, ``train_acc``, ``val_acc``,
        ``val_loss``, ``lr``, ``seconds``), the global step, and ``images`` trained in ``seconds`` of training by
        this process (the throughput)."""


def format_duration(seconds: float) -> str:
    """``3725`` → ``"1:02:05"``.

    >>> format_duration(59.6), format_duration(3725)
    ('0:01:00', '1:02:05')
    """
    s = int(round(max(0.0, seconds)))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class TrainLog:
    """Epoch lines and messages for one run (no-ops on ranks other than 0)."""

    def __init__(self, out_dir: Path, ctx: DistContext, epochs: int, hooks: Sequence[TrainHook] = ()) -> None:
        self.path = out_dir / LOG_FILE
        self.name = out_dir.name
        self.ctx = ctx
        self.epochs = epochs
        self.hooks = list(hooks)
        self.file = False  # the log file is used once the run directory holds its config
        self.pending: list[str] = []  # lines kept back until the run has something to report

    def open_file(self) -> None:
        self.file = True

    def message(self, text: str, *, echo: bool = True, hold: bool = False) -> None:
        """One line on stderr (stdout in a notebook; unless not ``echo``) and, once open, in the log file. A ``hold`` line reaches the
        file with the next one (a run that fails in its first epoch leaves no log behind, only its config)."""
        if not self.ctx.is_main:
            return
        if echo:
            # a notebook shows stderr as a warning: the lines are its cell's output there
            tqdm.write(f"peanchor: {self.name} {text}", file=sys.stdout if in_jupyter() else sys.stderr)
        if self.file:
            stamp = datetime.now(timezone.utc).isoformat(timespec="seconds")
            self.pending.append(f"{stamp} {text}\n")
            if not hold:
                fileio.append_text(self.path, "".join(self.pending))
                self.pending.clear()

    def interval(self, step: int, *, loss: float, lr: float) -> None:
        if self.ctx.is_main:
            for hook in self.hooks:
                hook.step(step, loss=loss, lr=lr)

    def epoch(self, row: Mapping[str, Any], *, step: int, images: int, seconds: float, eta_s: float) -> None:
        """The epoch's line (``images`` in ``seconds``: this session's throughput), then the hooks."""
        rate = images / seconds if seconds > 0 else 0.0
        self.message(
            f"epoch {row['epoch']}/{self.epochs} loss {row['train_loss']:.4f} acc {row['train_acc']:.4f} "
            f"val_acc {row['val_acc']:.4f} lr {row['lr']:.2e} {rate:,.0f} img/s eta {format_duration(eta_s)}"
        )
        if self.ctx.is_main:
            for hook in self.hooks:
                hook.epoch(row, step=step, images=images, seconds=seconds)
