"""peanchor: how positional encodings anchor spatial structure and robustness in Vision Transformers.

From Python (README.md, "Python"; docs/python.md)::

    import peanchor
    result = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], alphas=[1.0, 0.5, 0.0])
    peanchor.plot_ssdc_per_layer({"mine": result})
    result.save("runs/mine")  # analysis.json + analysis.csv
    result.to_pandas()        # its rows as a DataFrame (pip install 'peanchor[pandas]')
    peanchor.compare({"mine": result, "ape": "runs/ape"})       # one row per model
    peanchor.write_report({"mine": result, "ape": "runs/ape"}, "runs/report")

Imports: at import time only :mod:`peanchor.core` (the version, and the finder that keeps the old import paths
of moved modules working); lazily ``create_model`` / ``MODEL_SIZES`` from :mod:`peanchor.models`,
``load_model`` from :mod:`peanchor.checkpoint.files`, ``PE_NAMES`` from :mod:`peanchor.pe`, ``analyze`` / ``LENSES``
from :mod:`peanchor.api.analysis`, ``AnalysisPlan`` from :mod:`peanchor.analysis`, ``read_analysis`` / ``read_results`` /
``AnalysisResult`` from :mod:`peanchor.results.records`, the ``plot_*`` functions from :mod:`peanchor.report.plots`,
``compare`` from :mod:`peanchor.results.tables`, ``write_report`` from :mod:`peanchor.report`, ``train`` from
:mod:`peanchor.api.training`, ``audit`` (a callable package: ``peanchor.audit(model)``) and ``AuditReport`` from
:mod:`peanchor.audit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from peanchor.core.moved import install as _install_moved
from peanchor.core.version import __version__

_install_moved()  # old import paths (peanchor.fileio, peanchor.tables, ...) keep working

__all__ = [
    "__version__", "create_model", "load_model", "PE_NAMES", "MODEL_SIZES", "analyze", "LENSES", "AnalysisPlan",
    "AnalysisResult", "read_analysis", "plot_ssdc_per_layer", "plot_alpha_sweep", "plot_lenses", "plot_attention_heads",
    "plot_dose_response", "audit", "AuditReport",
    "compare", "write_report", "read_results", "train",
]  # fmt: skip

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.analysis.plan import AnalysisPlan
    from peanchor.audit import AuditReport, audit
    from peanchor.api.analysis import LENSES, analyze
    from peanchor.checkpoint.files import load_model
    from peanchor.models import MODEL_SIZES, create_model
    from peanchor.pe import PE_NAMES
    from peanchor.report import write_report
    from peanchor.report.plots import (plot_alpha_sweep, plot_attention_heads, plot_dose_response, plot_lenses,
                                       plot_ssdc_per_layer)
    from peanchor.results.records import AnalysisResult, read_analysis, read_results
    from peanchor.results.tables import compare
    from peanchor.api.training import train

# name → the module it lives in; imported on first use so that `peanchor --help` does not pay for torch.
_LAZY = {
    "create_model": "peanchor.models", "MODEL_SIZES": "peanchor.models", "PE_NAMES": "peanchor.pe",
    "load_model": "peanchor.checkpoint.files", "analyze": "peanchor.api.analysis", "LENSES": "peanchor.api.analysis",
    "AnalysisPlan": "peanchor.analysis.plan",
    "AnalysisResult": "peanchor.results.records", "read_analysis": "peanchor.results.records", "read_results": "peanchor.results.records",
    "plot_ssdc_per_layer": "peanchor.report.plots", "plot_alpha_sweep": "peanchor.report.plots",
    "plot_lenses": "peanchor.report.plots", "plot_attention_heads": "peanchor.report.plots",
    "plot_dose_response": "peanchor.report.plots",
    "AuditReport": "peanchor.audit",
    "compare": "peanchor.results.tables", "write_report": "peanchor.report", "train": "peanchor.api.training",
}  # fmt: skip


def __getattr__(name: str) -> Any:
    import importlib

    if name == "audit":  # the package, callable as peanchor.audit(model) (importing it binds it here anyway)
        return importlib.import_module("peanchor.audit")
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'peanchor' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The public API (:data:`__all__`, the lazy exports among it) and the module's dunders, for ``dir(peanchor)``
    and tab completion; the typing helpers imported here are left out."""
    return sorted({*__all__, *(n for n in globals() if n.startswith("__"))})
