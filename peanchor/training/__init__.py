"""Training: the config dataclasses and ``--set``, the resumable loop, its resume state and DDP helpers.

Presets (the configs runs start from) live in :mod:`peanchor.presets`.

>>> from peanchor.training import TrainConfig, apply_overrides
>>> apply_overrides(TrainConfig(), {"model.pe": "ape"}, ["optim.lr=3e-4"]).optim.lr
0.0003

Imports: :mod:`peanchor.training.config`, :mod:`peanchor.training.loop`.
"""

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
from peanchor.training.loop import evaluate, lr_at, param_groups, train

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
