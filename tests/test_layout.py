"""The package's layout keeps its promises: data flows one way (no module imports one below it in the flow,
lazily or not), the report never touches models, and no module grows past 500 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "peanchor"


def _stages_from_architecture() -> list[tuple[str, ...]]:
    """The stage list of docs/ARCHITECTURE.md (between its ``stages`` markers), upstream first: one source of truth
    for the doc and this test."""
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text[text.index("<!-- stages:begin") : text.index("<!-- stages:end -->")]
    items = re.split(r"^\d+\. ", block.split("-->", 1)[1], flags=re.M)[1:]  # "`a`, `b` (why)" per stage
    return [tuple(re.findall(r"`([\w_]+)`", item)) for item in items]


# The data flow, upstream first; a module may import its own stage and any stage before it.
STAGES = _stages_from_architecture()
STAGE = {name: i for i, names in enumerate(STAGES) for name in names}


def _top(module: str) -> str:
    return module.split(".")[1] if module.startswith("peanchor.") else module


def _peanchor_imports(path: Path) -> set[str]:
    """Every peanchor module ``path`` imports, at the top or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "peanchor":  # e.g. fileio, or __version__
            out.update(f"peanchor.{a.name}" for a in node.names if a.name in STAGE)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("peanchor."):
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("peanchor."))
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module":
            first = node.args[0] if node.args else None  # importlib.import_module("peanchor.x") or f"peanchor.x.{y}"
            text = first.values[0] if isinstance(first, ast.JoinedStr) and first.values else first
            if isinstance(text, ast.Constant) and str(text.value).startswith("peanchor."):
                out.add(str(text.value).rstrip("."))
    return out


MODULES = sorted(p for p in PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_no_module_imports_one_downstream_of_it(path: Path) -> None:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    own = STAGE[parts[0]]
    for module in _peanchor_imports(path):
        stage = STAGE[_top(module)]
        assert stage <= own, f"{'/'.join(parts)} ({STAGES[own][0]}...) imports {module}, which is downstream of it"


def test_the_report_reads_result_files_only() -> None:
    forbidden = ("peanchor.models", "peanchor.checkpoint", "peanchor.analysis", "peanchor.training", "peanchor.data",
                 "peanchor.pe", "peanchor.adapters")  # fmt: skip
    for path in (PACKAGE / "report").glob("*.py"):
        bad = [m for m in _peanchor_imports(path) if m.startswith(forbidden)]
        assert not bad, f"{path.name} imports {bad}"


def test_no_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(PACKAGE)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


def test_the_stage_list_covers_every_top_level_module_once() -> None:
    names = [n for stage in STAGES for n in stage]
    assert len(names) == len(set(names)), names
    tops = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in MODULES} - {"py.typed"}
    assert tops <= set(names), f"not in docs/ARCHITECTURE.md's stage list: {sorted(tops - set(names))}"


def test_every_module_says_what_it_may_import() -> None:
    missing = []
    for path in MODULES:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if path.name != "__main__.py" and "Imports:" not in doc:
            missing.append(str(path.relative_to(PACKAGE)))
    assert not missing, missing


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_the_imports_line_names_what_the_module_imports(path: Path) -> None:
    """The ``Imports:`` line names every other top-level peanchor module or package the code imports (at the top or
    inside a function), and none it does not; ``peanchor.errors`` may go unnamed."""
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    if "Imports:" not in doc:
        pytest.skip("no Imports: line (checked above)")
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    named = set(re.findall(r"peanchor\.(\w+)", doc[doc.index("Imports:") :])) - {own}
    imported = {_top(m) for m in _peanchor_imports(path)} - {own, "errors"}
    assert imported <= named, f"imports {sorted(imported - named)} but its Imports: line does not say so"
    assert named - {"errors"} <= imported, f"its Imports: line names {sorted(named - imported - {'errors'})}, unused"
