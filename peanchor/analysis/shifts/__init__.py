"""Content-disrupting distribution shifts on uint8 image batches, as plug-ins.

- :mod:`~peanchor.analysis.shifts.base`: what a kind is (:class:`ShiftKind`, :class:`Param`, ``@register``);
- :mod:`~peanchor.analysis.shifts.kinds`: the kinds, one module each (jpeg, blur, gaussian_noise, shot_noise,
  contrast, pixelate, defocus_blur), each with its parameters, its ImageNet-C / Tiny-ImageNet-C / CIFAR-10-C
  severity tables, its checks and its kernel;
- :mod:`~peanchor.analysis.shifts.registry`: the kinds, found by importing every module of ``kinds``;
- :mod:`~peanchor.analysis.shifts.shift`: :class:`Shift`, one kind with its parameters;
- :mod:`~peanchor.analysis.shifts.tables`: the table for a resolution, severity sweeps, the paper's shifts.

Departures from ImageNet-C that apply to every kind: float results are *rounded* to uint8 (ImageNet-C truncates with
``np.uint8``: at most one grey level), and nothing is re-encoded afterwards (ImageNet-C and Tiny-ImageNet-C stored
their images as JPEG, quality 85). Corrupting whole evaluation sets once (and caching them) is
:mod:`peanchor.analysis.corrupted_sets`.

Imports: its own modules; nothing heavy at import time (the CLI's help reads the registry).
"""

from peanchor.analysis.shifts.kinds.blur import default_blur_kernel_size
from peanchor.analysis.shifts.registry import SEVERITY_TABLES, SHIFT_KINDS, SHIFT_PARAMS, get_kind, shift_help
from peanchor.analysis.shifts.shift import Shift
from peanchor.analysis.shifts.tables import (
    PAPER_SHIFTS,
    TABLE_RESOLUTION,
    TableName,
    paper_shifts,
    paper_shifts_source,
    severity_shift,
    severity_table,
    table_name,
)

__all__ = [
    "PAPER_SHIFTS",
    "SEVERITY_TABLES",
    "SHIFT_KINDS",
    "SHIFT_PARAMS",
    "TABLE_RESOLUTION",
    "Shift",
    "TableName",
    "default_blur_kernel_size",
    "get_kind",
    "paper_shifts",
    "paper_shifts_source",
    "severity_shift",
    "severity_table",
    "shift_help",
    "table_name",
]
