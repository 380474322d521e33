"""The report, from result files only (never from models).

``write_report(results, out_dir)`` writes ``out_dir/figures/*.png|pdf``, ``out_dir/report.md`` and a
self-contained ``out_dir/report.html`` for a :class:`peanchor.results.records.Results` (read one with
:func:`peanchor.results.records.read_results`), or for analyses and result files gathered into one
(:mod:`~peanchor.report.inputs`):

* :mod:`~peanchor.report.summary`: the numbers (grouping, statistics over seeds, the ΔSSDC–FS correlation);
* :mod:`~peanchor.report.prose`: the text and tables, as a :class:`~peanchor.report.document.Report`, opening with
  :mod:`~peanchor.report.provenance`'s table of what was run and the claims' verdicts
  (:mod:`~peanchor.report.claims`, read from :mod:`~peanchor.report.evidence`'s intervals);
* :mod:`~peanchor.report.mixing`: which settings differ between the analyses compared, and the refusal of a
  meaningless mix;
* :mod:`~peanchor.report.figures`: the figures;
* :mod:`~peanchor.report.markdown`, :mod:`~peanchor.report.html`: the two renderers.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.core.fileio` (its modules add the conditions' facts and the statistics).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from peanchor.core import fileio
from peanchor.report.figures import make_figures
from peanchor.report.html import render_html
from peanchor.report.inputs import gather
from peanchor.report.markdown import render_markdown
from peanchor.report.mixing import check_comparable
from peanchor.report.prose import build_report
from peanchor.results.records import Results

__all__ = ["build_report", "gather", "render_html", "render_markdown", "write_report"]


def study_doc_link(out_dir: Path) -> str | None:
    """docs/study.md of the peanchor checkout this runs from, relative to ``out_dir`` (a link that works where the
    report is opened on this machine); None for an installed peanchor, which ships no docs."""
    study = Path(__file__).resolve().parents[2] / "docs" / "study.md"
    if not study.is_file():
        return None
    return Path(os.path.relpath(study, out_dir.resolve())).as_posix()


def write_report(results: Results | Any, out_dir: str | os.PathLike[str], allow_mixed: bool = False) -> list[Path]:
    """Write ``out_dir/figures/*.png|pdf``, ``out_dir/report.md`` and ``out_dir/report.html``; return the paths.

    ``results`` is a :class:`Results`, or anything :func:`peanchor.report.inputs.gather` reads: analyses, grids
    and paths to their files, in a mapping ``name → ...`` or a list (names inferred), e.g.
    ``write_report({"ape": "runs/ape", "mine": result}, "out")``. Every file is written atomically; figures whose
    data is missing are skipped. Analyses made on different images or with different permutations behind RPI
    are refused (one :class:`~peanchor.core.errors.DataError` line) unless ``allow_mixed``
    (:mod:`~peanchor.report.mixing`).

    Returns:
        The paths of the files written.
    """
    if not isinstance(results, Results):
        results = gather(results)
    check_comparable(results, allow_mixed)  # refuses analyses on other images or other RPI permutations
    out = Path(out_dir)
    figures = make_figures(results, out / "figures")
    report = build_report(results, figures, study_doc_link(out))
    md_path, html_path = out / "report.md", out / "report.html"
    fileio.write_text(md_path, render_markdown(report, out))
    fileio.write_text(html_path, render_html(report))
    return [p for f in figures for p in (f.png, f.pdf)] + [md_path, html_path]
