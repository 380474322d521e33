"""The presets: named training configs with their analysis defaults and shifts
(:mod:`~peanchor.presets.catalog`, re-exported here).

Imports: :mod:`peanchor.presets.catalog` (its public names).
"""

__all__ = ['PRESETS', 'PRESET_NAMES', 'Preset', 'get_preset', 'preset_help', 'preset_config', 'named_dataset',
    'preset_shifts', 'register_preset', 'resolve_config']  # fmt: skip

from peanchor.presets.catalog import (PRESETS, PRESET_NAMES, Preset, get_preset, preset_help, preset_config,
    named_dataset, preset_shifts, register_preset, resolve_config)  # noqa: E402
