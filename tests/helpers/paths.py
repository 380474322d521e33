"""Where the tests find the repository: its root (for docs/, examples/, benchmarks/, tools/) and the data files the
tests read, whatever folder a test file sits in; and :func:`import_file` for the scripts there that are not part of a
package (a tool, a benchmark, an example's module, another test file)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]  # tests/helpers/paths.py -> the repository
TEST_DATA = ROOT / "tests" / "data"  # the files tests read (tests of peanchor.data sit beside them)


def import_file(path: Path, name: str, *, reuse: bool = False) -> ModuleType:
    """The Python file at ``path`` executed as the module ``name`` (kept in ``sys.modules``, as an import would);
    with ``reuse``, the module already imported under that name when there is one."""
    if reuse and name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
