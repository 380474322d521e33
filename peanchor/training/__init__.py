"""Training: the config dataclasses and ``--set``, the resumable loop, its resume state and DDP helpers.

Presets (the configs runs start from) live in :mod:`peanchor.presets.catalog`.

>>> from peanchor.training import TrainConfig, apply_overrides
>>> apply_overrides(TrainConfig(), {"model.pe": "ape"}, ["optim.lr=3e-4"]).optim.lr
0.0003

The loop (torch) is imported on first use: the config and ``--set`` load without it.

Imports: :mod:`peanchor.training.config`, :mod:`peanchor.training.loop` (lazily).
"""

import importlib
from typing import TYPE_CHECKING, Any

from peanchor.training.config import (
    ModelConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
    apply_overrides,
    from_dict,
    load_config,
    to_dict,
    to_yaml,
)

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.training.loop import evaluate, lr_at, param_groups, train

_LOOP = ("evaluate", "lr_at", "param_groups", "train")  # peanchor.training.loop's, imported on first use (torch)

__all__ = [
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "TrainConfig",
    "apply_overrides",
    "evaluate",
    "from_dict",
    "load_config",
    "lr_at",
    "param_groups",
    "to_dict",
    "to_yaml",
    "train",
]


def __getattr__(name: str) -> Any:
    if name in _LOOP:
        value = getattr(importlib.import_module("peanchor.training.loop"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peanchor.training' has no attribute {name!r}")
