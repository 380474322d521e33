"""peanchor.pe.registry: a file in peanchor/pe/ is all a new PE takes."""

from __future__ import annotations

from peanchor.pe import PE_REGISTRY


def test_every_module_of_the_pe_package_is_imported_so_a_new_file_registers_itself():
    """docs/ARCHITECTURE.md's "How to add a positional encoding": a file in peanchor/pe/ is all it takes."""
    import pkgutil
    import sys

    import peanchor.pe

    modules = [m.name for m in pkgutil.iter_modules(peanchor.pe.__path__)]
    assert {"absolute", "rotary", "relative", "conditional"} <= set(modules)
    assert all(f"peanchor.pe.{m}" in sys.modules for m in modules)
    owners = {cls.__module__ for cls in PE_REGISTRY.values()}
    helpers = {"registry", "declaration", "lie"}  # modules that register no PE
    assert owners == {f"peanchor.pe.{m}" for m in ("base", *(set(modules) - helpers))}
