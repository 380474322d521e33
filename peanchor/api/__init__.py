"""The Python front end: ``peanchor.analyze`` and ``wrap_model`` (:mod:`~peanchor.api.analysis`, re-exported here)
and ``peanchor.train`` (:mod:`~peanchor.api.training`).

Imports: :mod:`peanchor.api.analysis` (its public names, on first use: it imports torch).
"""

__all__ = ['LENSES', 'AnalysisPlan', 'analyze', 'match_classes', 'run_analysis', 'wrap_model']  # fmt: skip


def __getattr__(name: str) -> object:
    if name in __all__:
        import importlib

        return getattr(importlib.import_module("peanchor.api.analysis"), name)
    raise AttributeError(f"module 'peanchor.api' has no attribute {name!r}")
