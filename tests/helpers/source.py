"""Python source parsed once per worker: the project tests (layout, imports, size) each read every module of the
package, and parsing is most of their time."""

from __future__ import annotations

import ast
import functools


@functools.cache
def parse(source: str) -> ast.Module:
    """``ast.parse(source)``, kept for the next test that reads the same text (a test that changes a module's text
    gets that text parsed). The tree is shared: read it, do not change it."""
    return ast.parse(source)
