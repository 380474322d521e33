"""What more than one sub-command uses: the ``--shift`` help text (:func:`shift_help`) and dataset keys set from flags and ``--set``.

Imports: :mod:`peanchor.analysis` (the shift registry, light: no torch); :mod:`peanchor.training` (the typed
``--set``) when a command runs.
"""

from __future__ import annotations

from typing import Any

from peanchor.analysis.shifts.registry import shift_help

__all__ = ["shift_help", "with_data_items"]  # shift_help(): the --shift help, from the registry (no torch), when a
# parser is built, so that the kinds of plug-ins loaded by then are in it


def with_data_items(spec: Any, flags: dict[str, Any], set_items: list[str]) -> Any:  # DataSpec -> DataSpec
    """``spec`` with dataset keys set, type-checked like ``train --set``: ``flags`` (key → value from the
    command's own options; None is skipped), then the user's ``--set`` items, which may say ``data.key`` or
    ``key``."""
    from peanchor.errors import ConfigError
    from peanchor.training.config import TrainConfig, parse_set_item, set_value

    config = TrainConfig(data=spec)
    for key, value in flags.items():
        if value is not None:
            set_value(config, f"data.{key}", value)
    for item in set_items:
        key, value, raw = parse_set_item(item)
        key = key.removeprefix("data.")
        if not key or "." in key:
            raise ConfigError(f"--set {item!r}: expected a dataset key such as val_size or hf_name")
        set_value(config, f"data.{key}", value, raw)
    config.data.validate()
    return config.data
