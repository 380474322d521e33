"""Positional encodings behind one small interface (see :mod:`peanchor.pe.base`).

``create_pe(name, ctx, **kwargs)`` builds one; ``PE_NAMES`` lists the registered names (a live view of
``PE_REGISTRY``, a :class:`peanchor.core.registry.Registry`: PEs of plug-ins are in it too). The registry and the names
load without torch (a name's module is imported on its first lookup, :mod:`peanchor.pe.registry`); the interface
(``PEContext``, ``PositionalEncoding``, ``RotaryTables``) is imported on first use. A PE class with a ``name``,
decorated with ``@PE_REGISTRY.register``, in a new file of this folder is registered once its name and module are
added to ``BUILT_IN`` (docs/ARCHITECTURE.md, "How to add a positional encoding").

Imports: its own modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from peanchor.pe.registry import BUILT_IN, PE_NAMES, PE_REGISTRY, create_pe, pe_names, register_pe

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.pe.base import PEContext, PositionalEncoding, RotaryTables

_BASE = ("PEContext", "PositionalEncoding", "RotaryTables")  # from peanchor.pe.base on first use (torch)

__all__ = ["BUILT_IN", "PE_NAMES", "PE_REGISTRY", "PEContext", "PositionalEncoding", "RotaryTables", "create_pe",
           "pe_names", "register_pe"]  # fmt: skip


def __getattr__(name: str) -> Any:
    if name in _BASE:
        value = getattr(importlib.import_module("peanchor.pe.base"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peanchor.pe' has no attribute {name!r}")
