"""Lenses on a model's spatial structure, one per module of this folder: each measures something per layer, with
tokens in order and under RPI, from the same passes as accuracy (:mod:`peanchor.lenses.base` is the interface).
Every module here is imported, in name order, so a lens decorated with ``@LENSES.register`` in a new file of this
folder is measured, written, logged and reported without editing anything else (docs/ARCHITECTURE.md, "How to add a
lens"); :data:`LENSES` (a :class:`peanchor.core.registry.Registry`, with the plug-ins of the entry-point group
``peanchor.lenses``) holds them in report order, :data:`LENS_NAMES` is a live view of their names.

The accumulators behind the lenses (:mod:`peanchor.metrics`) and torch are imported when a lens measures, not when
a record is read: reading result files needs neither.

Imports: its own modules.
"""

import importlib
import pkgutil

from peanchor.lenses.base import (
    MODES,
    HeadLayers,
    LayerIntervals,
    LayerPair,
    Lens,
    LensBatch,
    LensContext,
    LensFailure,
    NoOptions,
    Row,
    UnknownLensRecord,
    mean_and_std,
    plan_option,
)
from peanchor.lenses.registry import LENS_NAMES, LENSES, RESERVED, get_lens, lens_names, register_lens

for _module in pkgutil.iter_modules(__path__):  # sorted by name; the registry orders by each lens's `order`
    if _module.name not in ("base", "registry"):
        importlib.import_module(f"{__name__}.{_module.name}")  # registers the lens it defines

__all__ = ["LENSES", "LENS_NAMES", "MODES", "RESERVED", "HeadLayers", "LayerIntervals", "LayerPair", "Lens", "LensBatch", "LensContext",
           "LensFailure", "NoOptions", "Row", "UnknownLensRecord", "get_lens", "lens_names", "mean_and_std",
           "plan_option", "register_lens"]  # fmt: skip
