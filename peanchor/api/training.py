"""Training from a preset in one call: the Python form of ``peanchor train``.

>>> import peanchor
>>> run = peanchor.train("smoke", "runs/ape", pe="ape", settings={"train.epochs": 2})  # doctest: +SKIP
>>> model = peanchor.load_model(run)  # doctest: +SKIP

The keywords are ``peanchor train``'s flags (:data:`FLAG_KEYS`: ``pe``, ``rpt``, ``seed``, ``epochs``, ``data``, ...),
``settings`` any config key as ``--set`` takes it (``{"optim.lr": 3e-3}``); both go through the same
:func:`peanchor.presets.catalog.resolve_config` as the command line, so a run trained here and one trained there with the
same values have the same ``config.yaml`` and resume each other.

Imports: :mod:`peanchor.presets.catalog`, :mod:`peanchor.core.errors`; when run, :mod:`peanchor.training` (loop).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from peanchor.core.errors import ConfigError, did_you_mean

__all__ = ["FLAG_KEYS", "default_out", "train"]

#: ``peanchor train``'s flags (their Python keyword spelling) → the config key each sets.
FLAG_KEYS: dict[str, str] = {
    "data": "data.name",
    "data_root": "data.root",
    "class_list": "data.class_list",
    "img_size": "data.img_size",
    "model": "model.name",
    "pe": "model.pe",
    "patch_size": "model.patch_size",
    "rpt": "train.rpt",
    "epochs": "train.epochs",
    "seed": "train.seed",
    "device": "train.device",
    "compile": "train.compile",
}


def default_out(preset: str, pe: str, rpt: bool, seed: int) -> Path:
    """``runs/train-<preset>-<pe>[-rpt]-s<seed>``."""
    return Path("runs") / f"train-{preset}-{pe}{'-rpt' if rpt else ''}-s{seed}"


def overrides_of(flags: Mapping[str, Any]) -> dict[str, Any]:
    """The config overrides (dotted key → value) that ``flags`` (keyword → value, None: unset) stand for; an
    unknown keyword is one line naming the valid ones."""
    unknown = [k for k in flags if k not in FLAG_KEYS]
    if unknown:
        raise ConfigError(f"train() got an unknown keyword {unknown[0]!r}{did_you_mean(unknown[0], FLAG_KEYS)}; "
                          f"valid: {', '.join(FLAG_KEYS)} (any other config key goes in settings=)")  # fmt: skip
    return {FLAG_KEYS[k]: v for k, v in flags.items()}


def train(
    preset: str = "cpu",
    out: str | Path | None = None,
    *,
    settings: Mapping[str, Any] | None = None,
    progress: bool = True,
    **flags: Any,
) -> Path:
    """Train one condition of ``preset`` into the run directory ``out`` and return its path.

    Args:
        preset: a preset name (``peanchor train --preset``; plug-in presets too).
        out: the run directory (default ``runs/train-<preset>-<pe>[-rpt]-s<seed>``). A run with the same config
            there is resumed, a finished one is left alone, a different config is refused (as on the command line).
        settings: config keys and values, as ``--set`` takes them (``{"optim.lr": 3e-3, "data.train_size": 4096}``);
            applied after the flags.
        progress: progress bars where they show (a terminal, a notebook); False: none. A readable line per
            epoch is logged either way (``train.log``).
        flags: ``peanchor train``'s flags by keyword (:data:`FLAG_KEYS`), e.g. ``pe="rope"``, ``rpt=True``,
            ``seed=1``.

    Returns:
        The run directory: ``model.safetensors``, ``config.yaml``, ``metrics.csv``, ``summary.json``, ``train.log``.
        :func:`peanchor.load_model` reads the model back from it.
    """
    from peanchor.presets.catalog import resolve_config

    overrides = {**overrides_of(flags), **dict(settings or {})}
    config = resolve_config(preset, overrides)
    path = Path(out) if out is not None else default_out(config.preset, config.model.pe, config.train.rpt,
                                                         config.train.seed)  # fmt: skip
    from peanchor.training.loop import train as train_config

    train_config(config, path, progress=progress)
    return path
