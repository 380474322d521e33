"""The registry of lenses: :func:`register_lens` adds a :class:`~peanchor.lenses.base.Lens` class under its
``name``; :data:`LENSES` holds them in their report order (``order``, then name).

Imports: :mod:`peanchor.lenses.base`, :mod:`peanchor.errors`.
"""

from __future__ import annotations

from peanchor.errors import ConfigError
from peanchor.lenses.base import Lens

__all__ = ["LENSES", "get_lens", "lens_names", "register_lens"]

LENSES: dict[str, type[Lens]] = {}


def register_lens(cls: type[Lens]) -> type[Lens]:
    """Class decorator: register ``cls`` under ``cls.name`` (a second lens of the same name is refused)."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"{cls.__name__}.name must be an identifier, got {name!r}")
    if name in LENSES and LENSES[name] is not cls:
        raise ValueError(f"a lens named {name!r} is already registered ({LENSES[name].__name__})")
    LENSES[name] = cls
    ordered = sorted(LENSES.values(), key=lambda lens: (lens.order, lens.name))
    LENSES.clear()
    LENSES.update((lens.name, lens) for lens in ordered)
    return cls


def lens_names() -> tuple[str, ...]:
    """Every registered lens, in report order."""
    return tuple(LENSES)


def get_lens(name: str) -> type[Lens]:
    """The lens called ``name``, or one :class:`ConfigError` line listing the registered ones."""
    if name not in LENSES:
        raise ConfigError(f"unknown lens {name!r}; valid: {', '.join(LENSES)}")
    return LENSES[name]
