"""The registry of shift kinds: every module of :mod:`peanchor.analysis.shifts.kinds` is imported here, in name
order, and registers its kind; everything else reads the kinds from here (:func:`get_kind`, :data:`SHIFT_KINDS`,
:data:`SHIFT_PARAMS`, :data:`SEVERITY_TABLES`, :func:`shift_help`).

Imports: :mod:`peanchor.analysis.shifts.base`, :mod:`peanchor.analysis.shifts.kinds` (all of it),
:mod:`peanchor.errors`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

from peanchor.analysis.shifts import kinds as _kinds
from peanchor.analysis.shifts.base import KINDS, TABLE_NAMES, ShiftKind
from peanchor.errors import ConfigError

__all__ = ["KINDS", "SEVERITY_TABLES", "SHIFT_KINDS", "SHIFT_PARAMS", "get_kind", "kinds_line", "shift_help"]

for _module in sorted(m.name for m in pkgutil.iter_modules(_kinds.__path__)):
    importlib.import_module(f"{_kinds.__name__}.{_module}")

# The kinds, in module-name order, and each one's parameters (in the order names and descriptions list them).
SHIFT_KINDS: tuple[str, ...] = tuple(KINDS)
SHIFT_PARAMS: dict[str, tuple[str, ...]] = {name: kind.param_names for name, kind in KINDS.items()}
# Table → kind → severity 1..5 rows, as the generation scripts write them (a value, or a tuple of values).
SEVERITY_TABLES: dict[str, dict[str, tuple[Any, ...]]] = {
    table: {name: kind.tables[table] for name, kind in KINDS.items() if table in kind.tables} for table in TABLE_NAMES
}


def kinds_line() -> str:
    """``"blur (kernel_size, sigma); contrast (factor); ...; each also takes severity=1..5"``, for errors."""
    return "; ".join(f"{k.name} ({', '.join(k.param_names)})" for k in KINDS.values()) + "; each also takes severity=1..5"


def get_kind(name: str) -> ShiftKind:
    """The registered kind ``name``, or a :class:`ConfigError` that lists the valid ones."""
    kind = KINDS.get(name)
    if kind is None:
        raise ConfigError(f"unknown shift kind {name!r}; expected one of {', '.join(KINDS)}")
    return kind


def shift_help() -> str:
    """The ``--shift`` help of ``analyze`` and ``reproduce``: every kind with its parameters."""
    forms = []
    for kind in KINDS.values():
        required = [f"{p.name}={p.metavar}" for p in kind.params if p.required]
        optional = "".join(f"[,{p.name}={p.metavar}]" for p in kind.params if not p.required)
        forms.append(f"{kind.name}:{','.join(required)}{optional}")
    return (
        "KIND:key=value[,key=value], repeatable; replaces the preset's shift of that kind or adds one: "
        f"{', '.join(forms)}, or KIND:severity=1..5 (the ImageNet-C-style table for the model's resolution), "
        "e.g. --shift jpeg:quality=10 --shift blur:sigma=1.5,kernel_size=9"
    )
