"""mkdocs hooks for the docs site (mkdocs.yml, ``hooks:``).

The docstrings name other objects with Sphinx roles (``:class:`~peanchor.results.records.Results```), which
mkdocstrings leaves as they are: ``:class:`` before a code span. This hook shows the code span alone, with the
name shortened where the role asks for it (``~``), as Sphinx would.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(~?)([\w.]+)</code>")


def strip_roles(html: str) -> str:
    """``:class:<code>~a.b.C</code>`` → ``<code>C</code>``; without ``~`` the whole dotted name stays."""
    return _ROLE.sub(lambda m: f"<code>{m[2].rsplit('.', 1)[-1] if m[1] else m[2]}</code>", html)


def on_page_content(html: str, **_: Any) -> str:
    return strip_roles(html)
