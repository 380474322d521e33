"""Figures and reports from result files only (never from models).

``load_results(path)`` reads and checks ``results.json``; ``write_report(results, out_dir)`` writes
``out_dir/figures/*.png|pdf``, ``out_dir/report.md`` and a self-contained ``out_dir/report.html``.
The paper's reference numbers live in :mod:`peanchor.report.reference`.
"""

from peanchor.report.render import load_results, validate_results, write_report

__all__ = ["load_results", "validate_results", "write_report"]
