"""``report.html``: the document as one self-contained page (inline CSS, PNG figures as base64 data URIs, no
external resources).

The blocks' text is Markdown, the same text ``report.md`` holds; markdown-it-py renders its inline markup (bold,
emphasis, code, links) wherever it stands, list items and table cells included, and escapes everything else
(raw HTML in the text is shown, never interpreted).

Imports: :mod:`peanchor.report.document`.
"""

from __future__ import annotations

import base64
import html

from markdown_it import MarkdownIt

from peanchor.report.document import Bullets, FigureBlock, Heading, Paragraph, Report, Table

__all__ = ["render_html"]

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;
color:#111;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8rem 0;font-size:.85rem}
th,td{border:1px solid #bbb;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}tr:nth-child(even) td{background:#fafafa}
caption{caption-side:bottom;text-align:left;font-size:.8rem;color:#444;padding-top:.3rem}
figure{margin:1rem 0}img{max-width:100%;height:auto}figcaption{font-size:.85rem;color:#333}
code{background:#f3f3f3;padding:0 .2rem;border-radius:3px}
""".strip()


# CommonMark, with raw HTML switched off: a "<" in a model's name is text.
_MARKDOWN = MarkdownIt("commonmark", {"html": False})


def _inline(text: str) -> str:
    """One block's Markdown text as HTML: inline markup rendered, everything else escaped."""
    return _MARKDOWN.renderInline(text)


def render_html(report: Report) -> str:
    """One self-contained HTML page: inline CSS, PNG figures as base64 data URIs, no external resources."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(report.title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
             f"<h1>{_inline(report.title)}</h1>"]
    for b in report.blocks:
        if isinstance(b, Heading):
            level = min(max(b.level, 2), 6)
            parts.append(f"<h{level}>{_inline(b.text)}</h{level}>")
        elif isinstance(b, Paragraph):
            parts.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            head = "<tr>" + "".join(f"<th>{_inline(h)}</th>" for h in b.header) + "</tr>"
            caption = f"<caption>{_inline(b.caption)}</caption>" if b.caption else ""
            parts.append(f"<table>{caption}<thead>{head}</thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, FigureBlock):
            f = b.figure
            data = base64.b64encode(f.png.read_bytes()).decode("ascii")
            alt = html.escape(f"Figure {b.number}: {f.title}", quote=True)
            parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{alt}">'
                         f"<figcaption>Figure {b.number}. {_inline(f.caption)}</figcaption></figure>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"
