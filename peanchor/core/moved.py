"""The import paths of modules that moved into folders keep working: ``import peanchor.fileio`` (or ``from
peanchor.tables import compare``) gives the module at its new home, the very same module object, so that a plug-in or
a notebook written against an older layout runs unchanged. New code imports the new paths; this map is the only
place the old ones live.

A finder on :data:`sys.meta_path` (installed once, by ``peanchor/__init__.py``) answers for the old names only; every
other import goes the usual way.

Imports: nothing at import time (the new module is imported when an old name is first imported).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
from types import ModuleType

__all__ = ["MOVED", "install"]

#: Old import path → the module's home now.
MOVED: dict[str, str] = {
    "peanchor.errors": "peanchor.core.errors", "peanchor.registry": "peanchor.core.registry",
    "peanchor.fileio": "peanchor.core.fileio", "peanchor.interrupts": "peanchor.core.interrupts",
    "peanchor.bars": "peanchor.core.bars", "peanchor.devices": "peanchor.core.devices",
    "peanchor.tracking": "peanchor.core.tracking", "peanchor.conditions": "peanchor.settings.conditions",
    "peanchor.plan_settings": "peanchor.settings.plan", "peanchor.results_schema": "peanchor.results.schema",
    "peanchor.tables": "peanchor.results.tables", "peanchor.dose_results": "peanchor.results.doses",
    "peanchor.weights": "peanchor.checkpoint.weights", "peanchor.train_preset": "peanchor.api.training",
}  # fmt: skip


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name and loads it as the module at its new path (registered under both names)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}  # new name → the module's own spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(MOVED[spec.name])
        self._specs[module.__name__] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        # The import machinery stamped the old name's spec on the module; it keeps its own (its real name and file).
        module.__spec__ = self._specs[module.__name__]


def install() -> None:
    """Put the finder on :data:`sys.meta_path`, once."""
    if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
        sys.meta_path.append(_MovedModules())
