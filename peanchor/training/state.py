"""Resume state: one safetensors file with the model, the optimizer and the run's scalars.

``RUN/checkpoint/state.safetensors`` holds

* ``model/<name>``: every entry of the model's state dict;
* ``optim/<param index>/<name>``: every tensor in the optimizer state (AdamW: ``step``,
  ``exp_avg``, ``exp_avg_sq``);
* metadata (JSON strings): the completed epoch count, the steps done in the epoch under way (0 at an
  epoch boundary) and that epoch's running loss/accuracy sums, the global step, the per-epoch
  history, the device type the run trains on, and the optimizer's param groups.

The file is replaced atomically at the end of every epoch, every ``train.checkpoint_every`` steps,
and when a stop signal arrives, so a crash leaves the previous one. RNG states need not be stored:
every random stream is a pure function of the seed and of where the run is (see :func:`derive_seed`):
dropout and batch augmentation of ``(step, rank)``, RPT of the step, the sample order of the epoch,
per-image augmentation of ``(epoch, sample)``. That makes resuming exact at any step. Nothing here
unpickles.

Imports: torch; :mod:`peanchor.checkpoint.files`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from peanchor.checkpoint.files import read_checkpoint, state_tensors, write_safetensors
from peanchor.core.errors import CheckpointError

STATE_FORMAT = "peanchor-train-state/1"
STATE_FILE = "state.safetensors"


def derive_seed(seed: int, *parts: object) -> int:
    """A 63-bit seed that is a pure function of ``seed`` and ``parts`` (e.g. ``"loader", epoch, rank``).

    >>> derive_seed(0, "rpt", 3) == derive_seed(0, "rpt", 3) != derive_seed(0, "rpt", 4)
    True
    """
    text = ":".join(str(p) for p in (seed, *parts))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") & ((1 << 63) - 1)


@dataclass
class TrainState:
    """Where a run stands: ``epoch`` epochs are complete, ``history`` has one row per epoch.

    Mid-epoch (``step_in_epoch > 0``): that many steps of epoch ``epoch + 1`` are done, ``partial`` holds the
    epoch's running sums so far (loss × images, correct, images) and ``partial_seconds`` its training time.
    """

    epoch: int = 0
    global_step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    world_size: int = 1
    step_in_epoch: int = 0
    steps_per_epoch: int = 0
    partial: list[float] = field(default_factory=list)
    partial_seconds: float = 0.0
    device_type: str = ""  # "cpu", "cuda", ...: "" in states written before it was recorded


def save_train_state(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, state: TrainState, config: dict[str, Any]
) -> None:
    """Write the resume state atomically (the previous file stays until the new one is complete)."""
    tensors = state_tensors(model, prefix="model/")
    opt = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for pid, entries in opt["state"].items():
        for name, value in entries.items():
            if torch.is_tensor(value):
                tensors[f"optim/{pid}/{name}"] = value.detach().to("cpu", copy=True).contiguous()
            else:
                scalars.setdefault(str(pid), {})[name] = value
    metadata = {
        "format": STATE_FORMAT,
        "epoch": str(state.epoch),
        "global_step": str(state.global_step),
        "world_size": str(state.world_size),
        "step_in_epoch": str(state.step_in_epoch),
        "steps_per_epoch": str(state.steps_per_epoch),
        "partial": json.dumps(state.partial),
        "partial_seconds": repr(float(state.partial_seconds)),
        "device_type": state.device_type,
        "history": json.dumps(state.history),
        "optim_param_groups": json.dumps(opt["param_groups"]),
        "optim_scalars": json.dumps(scalars),
        "config": json.dumps(config),
    }
    write_safetensors(path, tensors, metadata)


def load_train_state(path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> TrainState:
    """Restore ``model`` and ``optimizer`` in place from :func:`save_train_state` output."""
    tensors, meta = read_checkpoint(path)
    if meta.get("format") != STATE_FORMAT:
        raise CheckpointError(f"{path} is not a peanchor training state (format {meta.get('format')!r})")
    try:
        model_sd = {k[len("model/") :]: v for k, v in tensors.items() if k.startswith("model/")}
        missing = sorted(set(model.state_dict()) - set(model_sd))
        unexpected = sorted(set(model_sd) - set(model.state_dict()))
        if missing or unexpected:
            raise CheckpointError(
                f"{path} does not match the configured model (missing {missing[:3]}, unexpected {unexpected[:3]})"
            )
        model.load_state_dict(model_sd, strict=True)
        groups = json.loads(meta["optim_param_groups"])
        for g in groups:
            if "betas" in g:
                g["betas"] = tuple(g["betas"])
        opt_state: dict[int, dict[str, Any]] = {}
        for key, value in tensors.items():
            if key.startswith("optim/"):
                _, pid, name = key.split("/", 2)
                opt_state.setdefault(int(pid), {})[name] = value
        for pid, entries in json.loads(meta["optim_scalars"]).items():
            opt_state.setdefault(int(pid), {}).update(entries)
        optimizer.load_state_dict({"state": opt_state, "param_groups": groups})
        return TrainState(
            epoch=int(meta["epoch"]),
            global_step=int(meta["global_step"]),
            history=json.loads(meta["history"]),
            world_size=int(meta.get("world_size", "1")),
            step_in_epoch=int(meta.get("step_in_epoch", "0")),
            steps_per_epoch=int(meta.get("steps_per_epoch", "0")),
            partial=[float(v) for v in json.loads(meta.get("partial", "[]"))],
            partial_seconds=float(meta.get("partial_seconds", "0")),
            device_type=meta.get("device_type", ""),
        )
    except CheckpointError:
        raise
    except (KeyError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path} is a damaged training state ({e}); move it away to restart the run") from e


def read_state_epoch(path: str | Path) -> int:
    """How many epochs the state at ``path`` has completed (reads the header only)."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return int((f.metadata() or {})["epoch"])
    except Exception as e:
        raise CheckpointError(f"{path} is not a readable training state ({e})") from e
