"""Positional encodings behind one small interface (see :mod:`peanchor.pe.base`).

``create_pe(name, ctx, **kwargs)`` builds one; ``PE_NAMES`` lists the registered names (a live view of
``PE_REGISTRY``, a :class:`peanchor.registry.Registry`: PEs of plug-ins are in it too). Every module of this
package is imported here, in name order, so a PE class with a ``name`` decorated with ``@register_pe`` in a new
file of this folder is registered without editing anything else (docs/ARCHITECTURE.md, "How to add a positional
encoding").

Imports: its own modules.
"""

import importlib
import pkgutil

from peanchor.pe.base import PEContext, PositionalEncoding, RotaryTables
from peanchor.pe.registry import PE_NAMES, PE_REGISTRY, create_pe, pe_names, register_pe

for _module in pkgutil.iter_modules(__path__):  # sorted by name: the registry's order is stable
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")  # registers the PEs it defines

__all__ = ["PE_NAMES", "PE_REGISTRY", "PEContext", "PositionalEncoding", "RotaryTables", "create_pe", "pe_names",
           "register_pe"]  # fmt: skip
