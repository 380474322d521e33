"""``report.md``: the document as Markdown, figures referenced by path relative to the report.

Imports: :mod:`peanchor.report.document`.
"""

from __future__ import annotations

import os
from pathlib import Path

from peanchor.report.document import Bullets, FigureBlock, Heading, Paragraph, Report, Table

__all__ = ["render_markdown"]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def render_markdown(report: Report, out_dir: str | os.PathLike[str]) -> str:
    """Markdown with figures referenced relative to ``out_dir``."""
    base = Path(out_dir)
    lines = [f"# {report.title}", ""]
    for b in report.blocks:
        if isinstance(b, Heading):
            lines += [f"{'#' * b.level} {b.text}", ""]
        elif isinstance(b, Paragraph):
            lines += [b.text, ""]
        elif isinstance(b, Bullets):
            lines += [f"- {item}" for item in b.items] + [""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            lines.append("|" + "|".join("---" for _ in b.header) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            lines.append("")
            if b.caption:
                lines += [f"*{b.caption}*", ""]
        elif isinstance(b, FigureBlock):
            f = b.figure
            lines += [f"![Figure {b.number}: {f.title}]({_relative(f.png, base)})", "",
                      f"*Figure {b.number}. {f.caption}* ([PDF]({_relative(f.pdf, base)}))", ""]
    return "\n".join(lines).rstrip() + "\n"
