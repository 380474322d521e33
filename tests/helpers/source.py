"""Python source parsed once per worker: the project tests (layout, imports, size) each read every module of the
package, and parsing is most of their time."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator


@functools.cache
def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, kept for the next test that reads the same text (a test that changes a module's text
    gets that text parsed). The tree is shared: read it, do not change it."""
    return ast.parse(source)


def statements(tree: ast.AST) -> Iterator[ast.stmt]:
    """Every statement of ``tree``, nested ones too (in functions, classes, ``if``/``try``/``with``/loop bodies,
    ``match`` cases), without the expressions inside them: an import is a statement, and walking only these is many
    times faster than :func:`ast.walk`."""
    todo: list[ast.AST] = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.stmt):
            yield node
        for name in ("body", "orelse", "finalbody", "handlers", "cases"):
            children = getattr(node, name, None)
            if isinstance(children, list):
                todo.extend(reversed(children))
