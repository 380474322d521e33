"""The package's layout keeps its promises: data flows one way (no module imports one below it in the flow,
lazily or not), the report never touches models, and no module grows past 500 lines; and the tests mirror the package
(docs/ARCHITECTURE.md, "Tests")."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.source import parse

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
    for node in ast.walk(parse(path.read_text())):
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
        doc = ast.get_docstring(parse(path.read_text())) or ""
        if path.name != "__main__.py" and "Imports:" not in doc:
            missing.append(str(path.relative_to(PACKAGE)))
    assert not missing, missing


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PACKAGE)) for p in MODULES])
def test_the_imports_line_names_what_the_module_imports(path: Path) -> None:
    """The ``Imports:`` line names every other top-level peanchor module or package the code imports (at the top or
    inside a function), and none it does not; ``peanchor.core.errors`` may go unnamed."""
    doc = ast.get_docstring(parse(path.read_text())) or ""
    if "Imports:" not in doc:
        pytest.skip("no Imports: line (checked above)")
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    line = doc[doc.index("Imports:") :].replace("peanchor.core.errors", "")
    named = set(re.findall(r"peanchor\.(\w+)", line)) - {own}
    imported = {_top(m) for m in _peanchor_imports(path) - {"peanchor.core.errors"}} - {own}
    assert imported <= named, f"imports {sorted(imported - named)} but its Imports: line does not say so"
    assert named <= imported, f"its Imports: line names {sorted(named - imported)}, unused"


TESTS = ROOT / "tests"
CROSS_CUTTING = "project"  # tests of the project as a whole, of no single module


def _tested_module(test: Path) -> str | None:
    """The module or package ``tests/<path>/test_<name>[_<aspect>].py`` tests (``peanchor/<path>/<name>.py`` or
    ``peanchor/<path>/<name>/``), or None."""
    folder = PACKAGE / test.parent.relative_to(TESTS)
    words = test.stem.removeprefix("test_").split("_")
    for k in range(len(words), 0, -1):
        name = "_".join(words[:k])
        for module in (folder / f"{name}.py", folder / name / "__init__.py"):
            if name and module.is_file():
                return str(module.relative_to(ROOT))
    return None


def _misplaced(path: Path) -> str | None:
    """Why ``path`` (a Python file under tests/) breaks the rule, and where it should go; None when it keeps it."""
    rel = path.relative_to(TESTS)
    is_test = path.name.startswith("test_")
    if path.name == "conftest.py" or (rel.parts[0] == "helpers" and not is_test):
        return None
    if not is_test or rel.parts[0] == "helpers":
        return f"tests/{rel}: only test_*.py and conftest.py files sit here; a helper shared by test files goes in tests/helpers/"
    if rel.parts[0] == CROSS_CUTTING or _tested_module(path) is not None:
        return None
    first = path.stem.removeprefix("test_").split("_")[0]
    homes = [f"tests/{m.parent.relative_to(PACKAGE) / f'test_{m.stem}.py'}".replace("/./", "/")
             for m in sorted(PACKAGE.rglob(f"{first}*.py")) if m.stem != "__init__"]  # fmt: skip
    hint = f" (here perhaps {' or '.join(homes)})" if homes else ""
    where = "peanchor/" + ("" if rel.parent == Path(".") else f"{rel.parent.as_posix()}/")
    return (f"tests/{rel} tests no module of {where}: a test of peanchor/<path>/<module>.py is "
            f"tests/<path>/test_<module>.py or test_<module>_<aspect>.py{hint}; one of no single module goes in "
            f"tests/{CROSS_CUTTING}/")


def test_the_tests_mirror_the_package() -> None:
    """Every test file is tests/<path>/test_<module>.py (or test_<module>_<aspect>.py) for peanchor/<path>/<module>.py
    or the package peanchor/<path>/<module>/, or sits in tests/project/; besides them only conftest.py files and
    tests/helpers/ hold Python."""
    wrong = [why for path in sorted(TESTS.rglob("*.py")) if (why := _misplaced(path))]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("test", "expected"), [
    ("test_results.py", "peanchor/results/__init__.py"),
    ("test_lenses.py", "peanchor/lenses/__init__.py"),
    ("metrics/test_ssdc.py", "peanchor/metrics/ssdc.py"),
    ("metrics/test_ssdc_accumulator.py", "peanchor/metrics/ssdc.py"),
    ("adapters/test_hf_vit_interventions.py", "peanchor/adapters/hf_vit.py"),
    ("analysis/shifts/test_kinds.py", "peanchor/analysis/shifts/kinds/__init__.py"),
    ("analysis/shifts/kinds/test_jpeg.py", "peanchor/analysis/shifts/kinds/jpeg.py"),
    ("test_ssdc.py", None),  # metrics' module, not a top-level one
    ("metrics/test_nothing.py", None),
    ("nowhere/test_ssdc.py", None),
])  # fmt: skip
def test_the_mirror_rule_finds_the_tested_module(test: str, expected: str | None) -> None:
    assert _tested_module(TESTS / test) == expected


def test_a_misplaced_test_file_is_told_where_to_go() -> None:
    why = _misplaced(TESTS / "test_ssdc.py")
    assert why is not None and "tests/<path>/test_<module>.py" in why
    assert "tests/lenses/test_ssdc.py or tests/metrics/test_ssdc.py" in why
    for stray in ("analysis/builders.py", "helpers/test_images.py"):
        assert "tests/helpers/" in (_misplaced(TESTS / stray) or ""), stray
    for kept in ("conftest.py", "pe/conftest.py", "helpers/images.py", "project/test_layout.py", "data/test_hf.py"):
        assert _misplaced(TESTS / kept) is None, kept


# Where the docs, tools and code name a test file, the file exists (tests move with the modules they test).
NAMING = ["README.md", "CHANGELOG.md", "pyproject.toml", "mkdocs.yml", ".ci/run", "docs", "benchmarks", "tools",
          "examples", "peanchor", "tests"]  # fmt: skip


def test_every_test_file_named_by_path_exists() -> None:
    # This file is left out: it names missing test files on purpose.
    files = [p for name in NAMING for p in ([ROOT / name] if (ROOT / name).is_file() else (ROOT / name).rglob("*"))
             if p.is_file() and p.suffix in {".md", ".py", ".toml", ".yml", ".ipynb", ""}
             and p != Path(__file__).resolve()]  # fmt: skip
    missing = sorted({f"{p.relative_to(ROOT)}: {m}" for p in files
                      for m in re.findall(r"\btests/(?:[\w-]+/)*test_\w+\.py", p.read_text(errors="ignore"))
                      if not (ROOT / m).is_file()})  # fmt: skip
    assert not missing, missing

