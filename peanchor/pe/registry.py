"""Name → positional-encoding class.

Imports: :mod:`peanchor.pe.base`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from peanchor.pe.base import PEContext, PositionalEncoding

PE_REGISTRY: dict[str, type[PositionalEncoding]] = {"none": PositionalEncoding}

T = TypeVar("T", bound=type[PositionalEncoding])


def register_pe(name: str) -> Callable[[T], T]:
    def wrap(cls: T) -> T:
        if name in PE_REGISTRY:
            raise ValueError(f"positional encoding {name!r} is registered twice")
        cls.name = name
        PE_REGISTRY[name] = cls
        return cls

    return wrap


def pe_names() -> tuple[str, ...]:
    return tuple(PE_REGISTRY)


def create_pe(name: str, ctx: PEContext, **kwargs: Any) -> PositionalEncoding:
    """Build the PE registered as ``name``; an unknown name raises ``ValueError`` listing the valid ones."""
    try:
        cls = PE_REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown positional encoding {name!r}; valid: {', '.join(PE_REGISTRY)}") from None
    try:
        return cls(ctx, **kwargs)
    except TypeError as e:
        raise ValueError(f"bad options for positional encoding {name!r}: {e}") from None
