"""Training: the config (presets + ``--set``), the resumable loop, its resume state and DDP helpers.

>>> from peanchor.training import resolve_config
>>> resolve_config("smoke", {"model.pe": "ape"}, ["optim.lr=3e-4"]).optim.lr
0.0003
"""

from peanchor.training.config import (
    PRESETS,
    ModelConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
    condition_name,
    from_dict,
    load_config,
    preset_config,
    resolve_config,
    to_dict,
    to_yaml,
)
from peanchor.training.loop import evaluate, lr_at, param_groups, train

__all__ = [
    "PRESETS",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "TrainConfig",
    "condition_name",
    "evaluate",
    "from_dict",
    "load_config",
    "lr_at",
    "param_groups",
    "preset_config",
    "resolve_config",
    "to_dict",
    "to_yaml",
    "train",
]
