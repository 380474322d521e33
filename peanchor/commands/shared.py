"""What more than one sub-command uses: the ``--shift`` help text (:func:`shift_help`), the lenses' names and
options for the help texts (:func:`lens_list`, :func:`lens_options_help`), and dataset keys set from flags and
``--set``.

Imports: :mod:`peanchor.analysis` (the shift registry, light: no torch), :mod:`peanchor.lenses` (the lens registry,
light too); :mod:`peanchor.training` (the typed ``--set``) when a command runs.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from peanchor.analysis.shifts.registry import shift_help
from peanchor.lenses import LENSES

# shift_help(): the --shift help, from the registry (no torch), called when a parser is built, so that the kinds of
# the plug-ins loaded by then are in it.
__all__ = ["lens_descriptions", "lens_list", "lens_names", "lens_options_help", "shift_help", "with_data_items"]


def lens_options_help() -> str:
    """``analysis.lenses.ssdc.{mode,metric,bootstrap}, ...``: every registered lens's options (plug-ins too), for
    the ``--set`` help of ``analyze`` and ``reproduce``."""
    forms = []
    for name, lens in LENSES.items():
        options = [f.name for f in dataclasses.fields(lens.options_type)]
        if options:
            forms.append(f"analysis.lenses.{name}.{{{','.join(options)}}}")
    return ", ".join(forms)


def lens_names() -> list[str]:
    """The registered lenses' names (the lens registry loads no torch), in report order."""
    return list(LENSES)


def lens_list() -> str:
    """The registered lenses' titles for a help text: ``SSDC, probe R², attention distance and effective rank``."""
    titles = [lens.title for lens in LENSES.values()]
    return ", ".join(titles[:-1]) + (" and " if len(titles) > 1 else "") + titles[-1]


def lens_descriptions() -> str:
    """Each registered lens in a phrase: its title and, in brackets, its key (``--set analysis.lenses``)."""
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
