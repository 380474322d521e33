"""peanchor: how positional encodings anchor spatial structure and robustness in Vision Transformers.

From Python (README.md, "Python"; docs/python.md)::

    import peanchor
    result = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], alphas=[1.0, 0.5, 0.0])
    peanchor.plot_ssdc_per_layer({"mine": result})
    result.save("runs/mine")  # analysis.json + analysis.csv
    result.to_pandas()        # its rows as a DataFrame (pip install 'peanchor[pandas]')
    peanchor.compare({"mine": result, "ape": "runs/ape"})       # one row per model
    peanchor.write_report({"mine": result, "ape": "runs/ape"}, "runs/report")

Imports: nothing at import time; lazily ``create_model`` / ``MODEL_SIZES`` from :mod:`peanchor.models`,
``load_model`` from :mod:`peanchor.checkpoint`, ``PE_NAMES`` from :mod:`peanchor.pe`, ``analyze`` / ``LENSES``
from :mod:`peanchor.api`, ``AnalysisPlan`` from :mod:`peanchor.analysis`, ``read_analysis`` / ``read_results`` /
``AnalysisResult`` from :mod:`peanchor.results`, the ``plot_*`` functions from :mod:`peanchor.report.plots`,
``compare`` from :mod:`peanchor.tables`, ``write_report`` from :mod:`peanchor.report`, ``train`` from
:mod:`peanchor.train_preset`, ``audit`` (a callable package: ``peanchor.audit(model)``) and ``AuditReport`` from
:mod:`peanchor.audit`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = [
    "__version__", "create_model", "load_model", "PE_NAMES", "MODEL_SIZES", "analyze", "LENSES", "AnalysisPlan",
    "AnalysisResult", "read_analysis", "plot_ssdc_per_layer", "plot_alpha_sweep", "plot_lenses", "plot_attention_heads",
    "plot_dose_response", "audit", "AuditReport",
    "compare", "write_report", "read_results", "train",
]  # fmt: skip

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.analysis.plan import AnalysisPlan
    from peanchor.audit import AuditReport, audit
    from peanchor.api import LENSES, analyze
    from peanchor.checkpoint import load_model
    from peanchor.models import MODEL_SIZES, create_model
    from peanchor.pe import PE_NAMES
    from peanchor.report import write_report
    from peanchor.report.plots import (plot_alpha_sweep, plot_attention_heads, plot_dose_response, plot_lenses,
                                       plot_ssdc_per_layer)
    from peanchor.results import AnalysisResult, read_analysis, read_results
    from peanchor.tables import compare
    from peanchor.train_preset import train

# name → the module it lives in; imported on first use so that `peanchor --help` does not pay for torch.
_LAZY = {
    "create_model": "peanchor.models", "MODEL_SIZES": "peanchor.models", "PE_NAMES": "peanchor.pe",
    "load_model": "peanchor.checkpoint", "analyze": "peanchor.api", "LENSES": "peanchor.api",
    "AnalysisPlan": "peanchor.analysis.plan",
    "AnalysisResult": "peanchor.results", "read_analysis": "peanchor.results", "read_results": "peanchor.results",
    "plot_ssdc_per_layer": "peanchor.report.plots", "plot_alpha_sweep": "peanchor.report.plots",
    "plot_lenses": "peanchor.report.plots", "plot_attention_heads": "peanchor.report.plots",
    "plot_dose_response": "peanchor.report.plots",
    "AuditReport": "peanchor.audit",
    "compare": "peanchor.tables", "write_report": "peanchor.report", "train": "peanchor.train_preset",
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
