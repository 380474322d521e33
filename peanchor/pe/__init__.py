"""Positional encodings behind one small interface (see :mod:`peanchor.pe.base`).

``create_pe(name, ctx, **kwargs)`` builds one; ``PE_NAMES`` lists the registered names.

Imports: its own modules.
"""

from peanchor.pe import absolute, conditional, relative, rotary  # noqa: F401  (registers the PEs)
from peanchor.pe.base import PEContext, PositionalEncoding, RotaryTables
from peanchor.pe.registry import PE_REGISTRY, create_pe, pe_names, register_pe

PE_NAMES: tuple[str, ...] = pe_names()

__all__ = ["PE_NAMES", "PE_REGISTRY", "PEContext", "PositionalEncoding", "RotaryTables", "create_pe", "register_pe"]
