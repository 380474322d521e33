"""A timm model saved as a folder (``timm.models.save_for_hf``, or a Hugging Face hub snapshot of a timm model):
``config.json`` names the architecture (``architecture``), its build arguments (``model_args``) and its class count
(``num_classes``); the weights are ``model.safetensors`` (or ``pytorch_model.bin``, read without running code).
:func:`load_timm` takes such a folder (or its ``config.json``) wherever a timm model's name is taken, so that
``--timm NAME|DIR`` builds the same model either way, offline.

Imports: :mod:`peanchor.adapters` (timm_load), :mod:`peanchor.models` (interface).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from peanchor.adapters.timm_load import load_timm_model
from peanchor.core.errors import CheckpointError
from peanchor.models.interface import AnalysisInterface

__all__ = ["WEIGHT_FILES", "load_timm", "read_timm_folder"]

#: The weights a timm folder may hold, in the order they are looked for.
WEIGHT_FILES: tuple[str, ...] = ("model.safetensors", "pytorch_model.bin")


def read_timm_folder(path: str | os.PathLike[str]) -> tuple[str, Path, dict[str, Any]]:
    """``(architecture, weights file, create_model arguments)`` of a timm folder; one line for a folder that is not
    one (no ``config.json``, no ``architecture`` in it, no weights)."""
    folder = Path(path)
    folder = folder.parent if folder.name == "config.json" else folder
    config_file = folder / "config.json"
    try:
        config = json.loads(config_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CheckpointError(f"{folder} is not a timm model folder: it has no config.json") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"cannot read {config_file}: {e}") from None
    architecture = config.get("architecture") if isinstance(config, dict) else None
    if not isinstance(architecture, str):
        raise CheckpointError(f"{config_file} names no timm architecture (its 'architecture' key); it is not a "
                              "timm model's config (a transformers folder goes with --hf)")  # fmt: skip
    weights = next((folder / name for name in WEIGHT_FILES if (folder / name).is_file()), None)
    if weights is None:
        raise CheckpointError(f"{folder} has no weights ({' or '.join(WEIGHT_FILES)})")
    kwargs = dict(config.get("model_args") or {})
    if isinstance(config.get("num_classes"), int):
        kwargs.setdefault("num_classes", config["num_classes"])
    return architecture, weights, kwargs


def load_timm(name_or_folder: str | os.PathLike[str], **kwargs: Any) -> AnalysisInterface:
    """:func:`~peanchor.adapters.timm_vit.load_timm_model` for a timm model's name, or for a timm folder
    (:func:`read_timm_folder`: its architecture, arguments and weights; ``kwargs`` override its arguments)."""
    path = Path(name_or_folder)
    if not path.exists():
        return load_timm_model(str(name_or_folder), **kwargs)
    architecture, weights, saved = read_timm_folder(path)
    if kwargs.get("weights") is not None:
        raise CheckpointError(f"{path} holds its own weights ({weights.name}): give --weights only with a model name")
    kwargs.pop("weights", None)
    return load_timm_model(architecture, weights=weights, **{**saved, **{k: v for k, v in kwargs.items()
                                                                         if v is not None}})  # fmt: skip
