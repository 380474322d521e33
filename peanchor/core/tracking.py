"""Optional TensorBoard logging (``--tensorboard`` on ``train``, ``analyze`` and ``reproduce``; needs
``pip install 'peanchor[tensorboard]'``). Without it peanchor writes CSV and JSON only, and nothing here is imported.

Event files go beside the files they describe, each folder one TensorBoard run (``tensorboard --logdir runs``):

==================================  ========================================================================
``RUN/tensorboard/``                training: ``train/loss`` (running mean over the epoch so far) and
                                    ``train/lr`` every ``train.log_every`` steps; ``epoch/train_loss``,
                                    ``epoch/train_acc``, ``epoch/val_loss``, ``epoch/val_acc``, ``epoch/lr``,
                                    ``epoch/images_per_s`` (training throughput) at the end of every epoch.
                                    The step is the optimisation step.
``ANALYSIS/tensorboard/``           an analysis (``ANALYSIS`` is where analysis.json goes, ``RUN/analysis`` by
                                    default): ``analysis/clean_acc``, ``analysis/rpi_acc``,
                                    ``analysis/delta_ssdc``, ``acc/<shift>`` and ``fs/<shift>`` at step 0;
                                    every lens per layer with the layer as the step (its ``scalars``):
                                    ``ssdc/{normal,rpi}``, ``attention_distance/{normal,rpi}`` (Manhattan,
                                    mean over heads), ``probe_r2/{row,col}/{normal,rpi}``,
                                    ``effective_rank/{normal,rpi}`` (docs/lenses.md);
                                    ``severity_fs/<kind>`` with the severity (1-5) as the step;
                                    ``alpha/delta_ssdc``, ``alpha/clean_acc`` and ``alpha/fs/<shift>`` with
                                    100·α as the step; the shifts measured, as text.
``OUT/tensorboard/``                ``reproduce``: the report's figures as images (``report/<figure>``).
==================================  ========================================================================

A writer opens on the first value logged, so a command refused before it starts (or a run already finished, which
logs nothing) leaves no folder behind. Under ``torchrun`` only rank 0 logs.

Imports: :mod:`peanchor.core.errors`, :mod:`peanchor.results.records` (what an analysis holds), :mod:`peanchor.lenses` (their
scalars); ``torch.utils.tensorboard``
(which needs the ``tensorboard`` package) and Pillow when a writer opens.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from peanchor.core.errors import ConfigError
from peanchor.lenses import LENSES
from peanchor.results.records import AnalysisResult

__all__ = ["TENSORBOARD_DIR", "TensorBoardLog", "TrainingLog", "has_events", "log_analysis", "log_figures",
           "require_tensorboard"]  # fmt: skip

TENSORBOARD_DIR = "tensorboard"
_INSTALL = "--tensorboard needs the tensorboard package: pip install 'peanchor[tensorboard]'"


def require_tensorboard() -> None:
    """A :class:`ConfigError` with the install hint when TensorBoard's writer cannot be imported (checked before a
    command does any work)."""
    try:
        import torch.utils.tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError(_INSTALL) from None


def has_events(log_dir: str | os.PathLike[str]) -> bool:
    """Whether ``log_dir`` already holds a TensorBoard event file."""
    return any(Path(log_dir).glob("events.out.tfevents.*"))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value and abs(value) != float("inf")


class TensorBoardLog:
    """A ``SummaryWriter`` on ``log_dir``, opened on the first value; non-finite values are left out."""

    def __init__(self, log_dir: str | os.PathLike[str]) -> None:
        self.log_dir = Path(log_dir)
        self._writer: Any = None

    def _open(self) -> Any:
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ConfigError(_INSTALL) from None
            self._writer = SummaryWriter(log_dir=str(self.log_dir))
        return self._writer

    def scalar(self, tag: str, value: Any, step: int) -> None:
        if _finite(value):
            self._open().add_scalar(tag, float(value), int(step))

    def scalars(self, prefix: str, values: Mapping[str, Any], step: int) -> None:
        for name, value in values.items():
            self.scalar(f"{prefix}/{name}", value, step)

    def image(self, tag: str, png: str | os.PathLike[str], step: int = 0) -> None:
        import numpy as np
        from PIL import Image

        with Image.open(png) as img:
            pixels = np.asarray(img.convert("RGB"))  # (H, W, 3) uint8
        self._open().add_image(tag, pixels, int(step), dataformats="HWC")

    def text(self, tag: str, text: str, step: int = 0) -> None:
        self._open().add_text(tag, text, int(step))

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> TensorBoardLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class TrainingLog:
    """What the training loop reports to (:func:`peanchor.training.loop.train`'s ``tracker``): ``RUN/tensorboard``."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.log = TensorBoardLog(Path(run_dir) / TENSORBOARD_DIR)

    def step(self, step: int, *, loss: float, lr: float) -> None:
        self.log.scalars("train", {"loss": loss, "lr": lr}, step)

    def epoch(self, row: Mapping[str, Any], *, step: int, images: int, seconds: float) -> None:
        """One epoch's row of metrics.csv (and its val loss); ``images`` trained in ``seconds`` of training."""
        values = {k: row.get(k) for k in ("train_loss", "train_acc", "val_loss", "val_acc", "lr")}
        values["images_per_s"] = images / seconds if seconds > 0 else None
        self.log.scalars("epoch", values, step)

    def close(self) -> None:
        self.log.close()


def log_analysis(log: TensorBoardLog, result: AnalysisResult) -> None:
    """The scalars of one analysis (see the module docstring for the tags and what the step means)."""
    log.scalars("analysis", {"clean_acc": result.clean_acc, "rpi_acc": result.rpi_acc,
                             "delta_ssdc": result.delta_ssdc}, 0)  # fmt: skip
    log.scalars("acc", result.acc, 0)
    log.scalars("fs", result.fragility, 0)
    for name, lens in LENSES.items():
        record = result.lens(name)
        for tag, value, step in lens.scalars(record) if record is not None else ():
            log.scalar(tag, value, step)
    for kind, values in (result.severity_fragility or {}).items():
        for severity, value in enumerate(values, 1):
            log.scalar(f"severity_fs/{kind}", value, severity)
    for point in result.alpha_sweep:
        step = round(100 * point.alpha)
        log.scalars("alpha", {"delta_ssdc": point.delta_ssdc, "clean_acc": point.clean_acc}, step)
        log.scalars("alpha/fs", point.fragility, step)
    sources = result.shift_sources or {}
    lines = [f"- **{name}**: `{spec}`" + (f" ({sources[name]})" if name in sources else "")
             for name, spec in result.shifts.items()]  # fmt: skip
    log.text("analysis/shifts", "\n".join(lines))


def log_figures(log: TensorBoardLog, pngs: Iterable[str | os.PathLike[str]]) -> None:
    """Each PNG as the image ``report/<file stem>``."""
    for png in pngs:
        log.image(f"report/{Path(png).stem}", png)
