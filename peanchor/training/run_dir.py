"""A training run directory: its files, whether a config may resume it, and what it records.

::

    config.yaml          the resolved TrainConfig
    metrics.csv          one row per epoch: epoch, train_loss, train_acc, val_acc, lr, seconds
    train.log            one time-stamped line per epoch, and the run's start/resume/stop messages
    checkpoint/          resume state, replaced atomically after every epoch, every train.checkpoint_every
                         steps and on SIGTERM/SIGINT (see state.py)
    model.safetensors    final weights + model_args (load with peanchor.load_model)
    summary.json         written last: its presence marks the run as finished

Imports: :mod:`peanchor.training.config`, :mod:`peanchor.training.state`, :mod:`peanchor.checkpoint.files`,
:mod:`peanchor.core.fileio`.
"""

from __future__ import annotations

import csv
import json
import platform
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
import yaml
from torch import nn

from peanchor.core import fileio
from peanchor.checkpoint.files import MODEL_FILE
from peanchor.core.errors import RunDirError
from peanchor.training.config import RUNTIME_KEYS, TrainConfig, diff_configs, flat_dict, to_dict
from peanchor.training.distributed import DistContext
from peanchor.training.state import STATE_FILE, TrainState

__all__ = [
    "CHECKPOINT_DIR",
    "CONFIG_FILE",
    "METRICS_COLUMNS",
    "METRICS_FILE",
    "SUMMARY_FILE",
    "check_run_dir",
    "iter_history",
    "read_summary",
    "run_summary",
    "write_metrics",
]

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.csv"
SUMMARY_FILE = "summary.json"
CHECKPOINT_DIR = "checkpoint"
METRICS_COLUMNS = ("epoch", "train_loss", "train_acc", "val_acc", "lr", "seconds")


def _run_files_present(out_dir: Path) -> list[str]:
    names = (MODEL_FILE, METRICS_FILE, SUMMARY_FILE, CHECKPOINT_DIR)
    return [n for n in names if (out_dir / n).exists()]


def check_run_dir(config: TrainConfig, out_dir: Path) -> str:
    """``"fresh"``, ``"resume"`` or ``"finished"``; a different config is a :class:`RunDirError`.

    Read-only: a refused directory is left exactly as it was.
    """
    cfg_path = out_dir / CONFIG_FILE
    if not cfg_path.exists():
        present = _run_files_present(out_dir) if out_dir.is_dir() else []
        if present:
            raise RunDirError(
                f"{out_dir} holds run files ({', '.join(present)}) but no {CONFIG_FILE}; "
                "it is not a peanchor run directory I can resume: choose another --out"
            )
        return "fresh"
    try:
        old = yaml.safe_load(cfg_path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise RunDirError(f"cannot read {cfg_path} ({e}); choose another --out") from e
    if not isinstance(old, dict):
        raise RunDirError(f"{cfg_path} is not a peanchor config; choose another --out")
    defaults = flat_dict(TrainConfig())
    diff = {
        k: v
        for k, v in diff_configs(old, to_dict(config)).items()
        # A key the old config.yaml lacks (written before the key existed) had its default's meaning.
        if k not in RUNTIME_KEYS and not (v[0] == "<unset>" and v[1] == defaults.get(k, "<missing>"))
    }
    if diff:
        shown = "; ".join(f"{k}: {a!r} -> {b!r}" for k, (a, b) in list(diff.items())[:6])
        more = f" (and {len(diff) - 6} more)" if len(diff) > 6 else ""
        raise RunDirError(
            f"{out_dir} holds a run with a different config ({shown}{more}); "
            "use another --out, or the run's own settings to resume it"
        )
    if (out_dir / SUMMARY_FILE).exists() and (out_dir / MODEL_FILE).exists():
        return "finished"
    return "resume" if (out_dir / CHECKPOINT_DIR / STATE_FILE).exists() else "fresh"


def write_metrics(path: Path, history: list[dict[str, Any]]) -> None:
    lines = [",".join(METRICS_COLUMNS)]
    for row in history:
        lines.append(
            f"{row['epoch']},{row['train_loss']:.6f},{row['train_acc']:.6f},{row['val_acc']:.6f},"
            f"{row['lr']:.6g},{row['seconds']:.2f}"
        )
    fileio.write_text(path, "\n".join(lines) + "\n")


def read_summary(out_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((out_dir / SUMMARY_FILE).read_text())
    except (OSError, ValueError) as e:
        raise RunDirError(f"{out_dir / SUMMARY_FILE} is unreadable ({e})") from e


def run_summary(
    config: TrainConfig,
    out_dir: Path,
    model: nn.Module,
    info: Any,
    state: TrainState,
    ctx: DistContext,
    n_train: int,
    n_val: int,
    speed: dict[str, Any] | None = None,
) -> dict[str, Any]:
    from peanchor.core.version import __version__  # the package's own version: imported late, peanchor/__init__ is lazy

    last = state.history[-1] if state.history else {}
    best = max(state.history, key=lambda r: r["val_acc"]) if state.history else {}
    device = str(ctx.device)
    if ctx.device.type == "cuda":
        device += f" ({torch.cuda.get_device_name(ctx.device)})"
    return {
        "status": "finished",
        "run_dir": str(out_dir),
        "condition": config.condition,
        "pe": config.model.pe,
        "rpt": config.train.rpt,
        "model": config.model.name,
        "preset": config.preset,
        "data": config.data.name,
        "seed": config.train.seed,
        "epochs": config.train.epochs,
        "val_acc": last.get("val_acc"),
        "val_loss": last.get("val_loss"),
        "train_loss": last.get("train_loss"),
        "train_acc": last.get("train_acc"),
        "best_val_acc": best.get("val_acc"),
        "best_epoch": best.get("epoch"),
        "seconds": sum(r["seconds"] for r in state.history),
        "num_params": sum(p.numel() for p in model.parameters()),
        "num_classes": info.num_classes,
        "img_size": info.img_size,
        "num_patches": model.num_patches,
        "train_images": n_train,
        "val_images": n_val,
        "device": device,
        "world_size": ctx.world_size,
        "amp_bf16": config.train.amp and ctx.device.type == "cuda",
        "compile": config.train.compile,
        "speed": dict(speed or {}),  # the settings in effect: fused AdamW, TF32, loaders, device augmentation
        "model_args": model.model_args,
        "versions": {"peanchor": __version__, "torch": torch.__version__, "python": platform.python_version()},
        "finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def iter_history(out_dir: str | Path) -> Iterator[dict[str, str]]:
    """Rows of a run's ``metrics.csv`` as dicts of strings."""
    with open(Path(out_dir) / METRICS_FILE, newline="") as f:
        yield from csv.DictReader(f)
