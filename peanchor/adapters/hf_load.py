"""A transformers ``save_pretrained`` folder, read offline, as an :class:`~peanchor.adapters.hf_vit.HFViT`.

Imports: transformers (lazily); :mod:`peanchor.adapters` (backend, hf_families, hf_vit).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from peanchor.adapters.backend import require_library
from peanchor.adapters.hf_families import SUPPORTED_CLASSES
from peanchor.adapters.hf_vit import HFViT
from peanchor.core.errors import CheckpointError, ConfigError

__all__ = ["load_hf_model", "require_transformers"]

_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")  # fmt: skip


def require_transformers() -> Any:
    """The transformers module, or one PeanchorError line saying how to install it."""
    return require_library("transformers", "transformers")


def _read_stats(folder: Path) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """``image_mean``/``image_std`` from the folder's ``preprocessor_config.json``, when it has one."""
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return None, None
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from e
    mean, std = cfg.get("image_mean"), cfg.get("image_std")
    return (tuple(mean) if mean else None), (tuple(std) if std else None)


def load_hf_model(folder: str | Path, *, img_size: int | None = None) -> HFViT:
    """A local ``save_pretrained`` folder as an :class:`HFViT`, in eval mode.

    Read with ``local_files_only=True`` (nothing is downloaded) and without ``trust_remote_code``. The class comes
    from ``config.json``'s ``architectures``; a class outside :data:`SUPPORTED_CLASSES`, a folder without
    ``config.json`` or without weights is one :class:`~peanchor.core.errors.PeanchorError` line.

    Returns:
        The :class:`~peanchor.adapters.hf_vit.HFViT` wrapping the model, in eval mode.
    """
    transformers = require_transformers()
    path = Path(folder)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such directory (expected a transformers save_pretrained folder)")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path} has no config.json: not a transformers save_pretrained folder")
    if not any((path / f).is_file() for f in _WEIGHT_FILES):
        names = ", ".join(_WEIGHT_FILES[::2])
        raise CheckpointError(f"{path} has no weights ({names}): save them with model.save_pretrained")
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}/config.json could not be read: {str(e).strip().splitlines()[0]}") from e
    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch not in SUPPORTED_CLASSES:
        raise ConfigError(f"{path}: model class {arch} is not supported; supported: {', '.join(SUPPORTED_CLASSES)}")
    cls = getattr(transformers, arch)
    from transformers.utils import logging  # a submodule: imported by name, not reached as an attribute
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # one local folder: no "Loading weights" bar on stderr
    try:
        model = cls.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path}: transformers could not load {arch}: {str(e).strip().splitlines()[0]}") from e
    finally:
        if bars:
            logging.enable_progress_bar()
    mean, std = _read_stats(path)
    wrapped = HFViT(model, img_size=img_size, mean=mean, std=std)
    wrapped._model_args["folder"] = str(path)
    return wrapped.eval()
