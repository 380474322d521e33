"""The small core every stage stands on: one-line errors (:mod:`~peanchor.core.errors`), the registry of plug-ins
(:mod:`~peanchor.core.registry`), atomic file writes (:mod:`~peanchor.core.fileio`), clean interrupts
(:mod:`~peanchor.core.interrupts`), progress bars, devices, run tracking, the package's version, and the
old import paths of modules that moved (:mod:`~peanchor.core.moved`).

Imports: nothing at import time.
"""
