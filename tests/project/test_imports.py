"""No import cycle in the package, counting lazy imports (an import inside a function runs too, only later): the graph
of which module imports which has no loop. An import under ``if TYPE_CHECKING:`` never runs and is left out; an
import of a package's name that is itself a module (``from peanchor.core import fileio``) is an import of that module,
not of the package's ``__init__``."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.source import parse, statements

PACKAGE = ROOT / "peanchor"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _is_module(name: str) -> bool:
    return name in MODULES


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in statements(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def imports_of(name: str) -> dict[str, int]:
    """The peanchor modules ``name`` imports (anywhere in it, but under ``if TYPE_CHECKING:``), each with its line."""
    path = MODULES[name]
    tree = parse(path.read_text())
    skip = _type_checking_lines(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: dict[str, int] = {}
    for node in sorted(statements(tree), key=lambda n: n.lineno):  # the first line that imports a module names it
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .x import y
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{a.name}" if _is_module(f"{base}.{a.name}") else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and not _is_module(target) and target.startswith("peanchor"):
                target = target.rpartition(".")[0]  # a name inside a module: the module
            if target.startswith("peanchor") and target != name:
                out.setdefault(target, node.lineno)
    return out


@functools.cache
def graph() -> dict[str, dict[str, int]]:
    """Every module's imports (built on first use, not while the suite is collected)."""
    return {name: imports_of(name) for name in MODULES}


def _cycles() -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each as a list of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph()[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph()):
        if v not in index:
            visit(v)
    return found


def _describe(component: list[str]) -> str:
    members = set(component)
    edges = [f"{a} imports {b} (line {line})" for a in component for b, line in graph()[a].items() if b in members]
    return "; ".join(edges)


def test_there_is_no_import_cycle() -> None:
    cycles = _cycles()
    assert not cycles, "import cycles: " + " | ".join(_describe(c) for c in cycles)


@pytest.mark.parametrize(("source", "expected"), [
    ("import peanchor.core.fileio\n", {"peanchor.core.fileio"}),
    ("from peanchor.core import fileio\n", {"peanchor.core.fileio"}),
    ("from peanchor.core.fileio import atomic_write\n", {"peanchor.core.fileio"}),
    ("def f():\n    from peanchor.metrics import ssdc\n", {"peanchor.metrics.ssdc"}),
    ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from peanchor.models import vit\n", set()),
])  # fmt: skip
def test_the_graph_reads_each_kind_of_import(source: str, expected: set[str], tmp_path: Path, monkeypatch) -> None:
    path = PACKAGE / "core" / "errors.py"  # any module: its text is replaced below
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: source if self == path else Path.read_bytes(self).decode())
    assert set(imports_of("peanchor.core.errors")) == expected


def _reference_paths() -> list[str]:
    """Every object the API reference documents (``::: peanchor.x.y`` in docs/reference/)."""
    return sorted({line.split(":::", 1)[1].split()[0] for page in (ROOT / "docs" / "reference").glob("*.md")
                   for line in page.read_text().splitlines() if line.startswith(":::")})  # fmt: skip


def _resolve(path: str) -> object:
    import importlib

    parts = path.split(".")
    for k in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:k]))
        except ModuleNotFoundError:
            continue
        for attr in parts[k:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(path)


@pytest.mark.parametrize("path", _reference_paths())
def test_every_path_the_reference_documents_imports(path: str) -> None:
    assert _resolve(path) is not None


@pytest.mark.parametrize("old", sorted(__import__("peanchor.core.moved", fromlist=["MOVED"]).MOVED))
def test_a_moved_module_keeps_its_old_import_path(old: str) -> None:
    """``import peanchor.fileio`` (the layout before the stages became folders) gives the module at its new home:
    the same object, with its own name and spec."""
    import importlib

    from peanchor.core.moved import MOVED

    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__name__ == MOVED[old] and module.__spec__.name == MOVED[old]
    assert getattr(importlib.import_module(old.rpartition(".")[0]), old.rpartition(".")[2]) is module


def test_the_package_keeps_few_loose_modules() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(loose) <= 4, f"loose modules in peanchor/: {loose}; a module belongs in its stage's folder"
