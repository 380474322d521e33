"""peanchor.pe.registry: the built-in PEs are listed by name and module without importing them (no torch), and the
list is the classes' own names."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys

from peanchor.pe import BUILT_IN, PE_REGISTRY

from tests.helpers.paths import ROOT


def test_the_lazy_list_is_what_the_modules_register():
    """docs/ARCHITECTURE.md's "How to add a positional encoding": a file in peanchor/pe/ and its line in BUILT_IN;
    every module imported, every class registered is listed, under its own name, from its own module."""
    import peanchor.pe

    for module in pkgutil.iter_modules(peanchor.pe.__path__):
        importlib.import_module(f"peanchor.pe.{module.name}")
    registered = {name: cls for name, cls in PE_REGISTRY.items() if not name.startswith("test_")}
    assert tuple(registered) == tuple(BUILT_IN)
    for name, cls in registered.items():
        assert cls.name == name and BUILT_IN[name].partition(":")[0] == cls.__module__, name


def test_the_names_load_without_torch_and_a_lookup_imports_its_module():
    script = ("import sys\nfrom peanchor.pe import PE_NAMES, PE_REGISTRY\nnames = tuple(PE_NAMES)\n"
              "before = 'torch' in sys.modules\ncls = PE_REGISTRY.lookup('rope')\n"
              "print(names == tuple(__import__('peanchor.pe.registry').pe.registry.BUILT_IN), before, "
              "cls.__module__, 'torch' in sys.modules)")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.stdout.split() == ["True", "False", "peanchor.pe.rotary", "True"]
