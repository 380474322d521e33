"""What more than one sub-command uses: the ``--shift`` help text, the lenses' names for the help texts and dataset
keys set from flags and ``--set``.

Imports: :mod:`peanchor.analysis` (the shift registry, light: no torch), :mod:`peanchor.lenses` (the lens
registry, light too); :mod:`peanchor.training` (the typed ``--set``) when a command runs.
"""

from __future__ import annotations

from typing import Any

from peanchor.analysis.shifts.registry import shift_help

__all__ = ["SHIFT_HELP", "lens_descriptions", "lens_list", "lens_names", "with_data_items"]

# The --shift help of analyze and reproduce, generated from the shift registry (which loads no torch).
SHIFT_HELP = shift_help()


def lens_names() -> list[str]:
    """The registered lenses' names (the lens registry loads no torch), in report order."""
    from peanchor.lenses import LENSES

    return list(LENSES)


def lens_list() -> str:
    """The registered lenses' titles for a help text: ``SSDC, probe R², attention distance and effective rank``."""
    from peanchor.lenses import LENSES

    titles = [lens.title for lens in LENSES.values()]
    return ", ".join(titles[:-1]) + (" and " if len(titles) > 1 else "") + titles[-1]


def lens_descriptions() -> str:
    """Each registered lens in a phrase: its title and, in brackets, its key (``--set analysis.lenses``)."""
    from peanchor.lenses import LENSES

    return ", ".join(f"{lens.title} ({name})" for name, lens in LENSES.items())


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
