"""The report, from result files only (never from models).

``write_report(results, out_dir)`` writes ``out_dir/figures/*.png|pdf``, ``out_dir/report.md`` and a
self-contained ``out_dir/report.html`` for a :class:`peanchor.results.Results` (read one with
:func:`peanchor.results.read_results`):

* :mod:`~peanchor.report.summary`: the numbers (grouping, statistics over seeds, the ΔSSDC–FS correlation);
* :mod:`~peanchor.report.prose`: the text and tables, as a :class:`~peanchor.report.document.Report`;
* :mod:`~peanchor.report.figures`: the figures;
* :mod:`~peanchor.report.markdown`, :mod:`~peanchor.report.html`: the two renderers.

Imports: :mod:`peanchor.results`, :mod:`peanchor.fileio` (its modules add the conditions' facts and the statistics).
"""

from __future__ import annotations

import os
from pathlib import Path

from peanchor import fileio
from peanchor.report.figures import make_figures
from peanchor.report.html import render_html
from peanchor.report.markdown import render_markdown
from peanchor.report.prose import build_report
from peanchor.results import Results

__all__ = ["build_report", "render_html", "render_markdown", "write_report"]


def write_report(results: Results, out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``out_dir/figures/*.png|pdf``, ``out_dir/report.md`` and ``out_dir/report.html``; return the paths.

    Every file is written atomically; figures whose data is missing are skipped.
    """
    out = Path(out_dir)
    figures = make_figures(results, out / "figures")
    report = build_report(results, figures)
    md_path, html_path = out / "report.md", out / "report.html"
    fileio.write_text(md_path, render_markdown(report, out))
    fileio.write_text(html_path, render_html(report))
    return [p for f in figures for p in (f.png, f.pdf)] + [md_path, html_path]
