"""The registry of lenses: :data:`LENSES`, a :class:`peanchor.core.registry.Registry` of :class:`~peanchor.lenses.base.Lens`
classes by ``name`` in their report order (``order``, then name), with plug-ins from the entry-point group
``peanchor.lenses``; ``@LENSES.register`` registers one (:func:`register_lens` is its older spelling).

A lens's record sits beside the result files' own keys (``analysis.json``'s ``settings``, a model's ``seed`` in
``results.json``), so those names are reserved (:data:`RESERVED`; a test keeps it in step with
:mod:`peanchor.results.records`).

Imports: :mod:`peanchor.lenses.base`, :mod:`peanchor.core.registry`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

from typing import Any

from peanchor.lenses.base import Lens, NoOptions
from peanchor.core.registry import NamesView, Registry

__all__ = ["LENSES", "LENS_NAMES", "RESERVED", "get_lens", "lens_names", "register_lens"]

#: The keys of ``analysis.json`` and of a model in ``results.json`` that are not lens records (``notes``: the
#: analysis log's lines, reserved ahead of the field).
RESERVED: tuple[str, ...] = (
    "acc", "alpha_sweep", "analysis_seconds", "clean_acc", "condition", "delta_ssdc", "dose_sweeps", "forward_passes",
    "fragility",
    "lenses", "model", "name", "notes", "num_images", "passes", "pe", "rpi_acc", "rpt", "run_dir", "schema",
    "schema_version", "seconds", "seed", "settings", "severities", "severity_fragility", "severity_shifts",
    "severity_table", "shift_sources", "shifts", "source", "timing", "train",
    # issue 35: the intervals, the record of an analysis's settings and environment, the α trends
    "acc_ci", "alpha_trends", "analysis_settings", "chance", "ci_level", "clean_acc_ci", "delta_ssdc_ci", "environment",
    "fragility_ci", "fragility_undefined", "rpi_acc_ci",
    "resolution",  # top-1 at other image sizes
)  # fmt: skip


def _check(cls: Any) -> None:
    if not (isinstance(cls, type) and issubclass(cls, Lens)):
        raise TypeError(f"register_lens takes a Lens subclass, got {cls!r}")
    options = cls.options_type
    if options is not NoOptions and not (isinstance(options, type) and hasattr(options, "__dataclass_fields__")):
        raise TypeError(f"{cls.__name__}.options_type must be a dataclass, got {options!r}")


LENSES: Registry[type[Lens]] = Registry("lens", "peanchor.lenses", reserved=RESERVED, check=_check,
                                        order=lambda lens: (lens.order, lens.name))  # fmt: skip
#: Every registered lens, in report order; a live view (a lens registered later is in it).
LENS_NAMES = NamesView(LENSES)


def register_lens(cls: type[Lens]) -> type[Lens]:
    """The older spelling of ``@LENSES.register``: ``cls`` under ``cls.name`` (a taken or reserved name is one line's
    refusal).

    Returns:
        ``cls`` itself, now registered.
    """
    return LENSES.register(cls)


def lens_names() -> tuple[str, ...]:
    """Every registered lens, in report order."""
    return LENSES.names()


def get_lens(name: str) -> type[Lens]:
    """The lens called ``name``, or one :class:`~peanchor.core.errors.ConfigError` line listing the registered ones."""
    return LENSES.lookup(name)
