"""The package's layout keeps its promises: data flows one way (no module imports one below it in the flow,
lazily or not), the report never touches models, and no module grows past 500 lines."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "peanchor"

# The data flow, upstream first; a module may import its own stage and any stage before it.
STAGES: list[tuple[str, ...]] = [
    ("errors", "interrupts", "fileio", "conditions", "results", "tracking", "metrics", "interventions", "weights", "data",
     "pe"),
    ("models",),
    ("checkpoint", "adapters"),
    ("training", "presets", "convert"),  # convert writes run directories, as training does
    ("analysis",),
    ("api",),  # peanchor.analyze: the Python front end, and the analysis path the CLI shares
    ("report",),
    ("grid",),
    ("commands", "cli", "__main__", "__init__"),
]
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


def test_every_module_says_what_it_may_import() -> None:
    missing = []
    for path in MODULES:
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if path.name != "__main__.py" and "Imports:" not in doc:
            missing.append(str(path.relative_to(PACKAGE)))
    assert not missing, missing
