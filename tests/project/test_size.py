"""No function or method in peanchor/ is over 80 lines (from its ``def`` line to its last line, decorators left out):
a longer one is split into named steps (docs/ARCHITECTURE.md, STYLE.md)."""

from __future__ import annotations

import ast
import textwrap

from tests.helpers.paths import ROOT
from tests.helpers.source import parse

PACKAGE = ROOT / "peanchor"
MAX_LINES = 80

def long_functions(source: str, where: str, limit: int = MAX_LINES) -> dict[str, int]:
    """``"<where>::<qualified name>"`` → lines, for every function or method of ``source`` over ``limit`` lines."""
    found: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                lines = child.end_lineno - child.lineno + 1  # type: ignore[operator]
                if not isinstance(child, ast.ClassDef) and lines > limit:
                    found[f"{where}::{name}"] = lines
                visit(child, f"{name}.")
            else:
                visit(child, prefix)

    visit(parse(source), "")
    return found


def package_long_functions() -> dict[str, int]:
    found: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        found |= long_functions(path.read_text(), path.relative_to(PACKAGE).as_posix())
    return found


def test_no_function_is_over_80_lines() -> None:
    over = package_long_functions()
    assert not over, "split into named steps (≤ 80 lines each): " + ", ".join(
        f"peanchor/{name} ({n} lines)" for name, n in sorted(over.items()))


def test_the_count_finds_nested_functions_and_methods_and_names_them() -> None:
    body = "\n".join(f"        x{i} = {i}" for i in range(80))  # 80 lines of body + the def line = 81
    source = textwrap.dedent("""\
        def short():
            return 1


        class Holder:
            def method(self):
        {body}

            async def fine(self):
                return 2


        def outer():
            def inner():
        {body}
            return inner
        """).format(body=body)
    found = long_functions(source, "m.py")
    assert found == {"m.py::Holder.method": 81, "m.py::outer": 83, "m.py::outer.inner": 81}
    assert long_functions(source, "m.py", limit=81) == {"m.py::outer": 83}
