"""The registry of shift kinds: every module of :mod:`peanchor.analysis.shifts.kinds` is imported here, in name
order, and registers its kind, and plug-ins add theirs (entry-point group ``peanchor.shifts``, ``--plugin``);
everything else reads the kinds from here (:func:`get_kind`, :data:`SHIFT_KINDS`, :data:`SHIFT_PARAMS`,
:data:`SEVERITY_TABLES`, :func:`shift_help`). The three data views are live: they read the registry when used.

Imports: :mod:`peanchor.analysis.shifts.base`, :mod:`peanchor.analysis.shifts.kinds` (all of it),
:mod:`peanchor.core.registry`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from typing import Any

from peanchor.analysis.shifts import kinds as _kinds
from peanchor.analysis.shifts.base import KINDS, TABLE_NAMES, ShiftKind
from peanchor.core.errors import ConfigError
from peanchor.core.registry import DerivedView, NamesView

__all__ = ["KINDS", "SEVERITY_TABLES", "SHIFT_KINDS", "SHIFT_PARAMS", "get_kind", "kinds_line", "shift_help"]

for _module in sorted(m.name for m in pkgutil.iter_modules(_kinds.__path__)):
    importlib.import_module(f"{_kinds.__name__}.{_module}")

# The kinds, built-ins in module-name order, then plug-ins, and each one's parameters (in the order names and
# descriptions list them).
SHIFT_KINDS = NamesView(KINDS)
SHIFT_PARAMS: Mapping[str, tuple[str, ...]] = DerivedView(lambda: {n: k.param_names for n, k in KINDS.items()})


def _severity_tables() -> dict[str, dict[str, tuple[Any, ...]]]:
    return {table: {name: kind.tables[table] for name, kind in KINDS.items() if table in kind.tables}
            for table in TABLE_NAMES}  # fmt: skip


# Table → kind → severity 1..5 rows, as the generation scripts write them (a value, or a tuple of values).
SEVERITY_TABLES: Mapping[str, dict[str, tuple[Any, ...]]] = DerivedView(_severity_tables)


def kinds_line() -> str:
    """``"blur (kernel_size, sigma); contrast (factor); ...; each also takes severity=1..5"``, for errors."""
    return "; ".join(f"{k.name} ({', '.join(k.param_names)})" for k in KINDS.values()) + "; each also takes severity=1..5"


def get_kind(name: str) -> ShiftKind:
    """The registered kind ``name``, or a :class:`ConfigError` that lists the valid ones."""
    kind = KINDS.get(name)
    if kind is None:
        raise ConfigError(KINDS.unknown(name, valid_word="expected one of"))
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
