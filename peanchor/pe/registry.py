"""Name → positional-encoding class: :data:`PE_REGISTRY`, a :class:`peanchor.registry.Registry` (plug-ins from the
entry-point group ``peanchor.pes``), :func:`register_pe` and :func:`create_pe`.

Imports: :mod:`peanchor.pe.base`, :mod:`peanchor.registry`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, TypeVar, overload

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.registry import NamesView, Registry

__all__ = ["PE_NAMES", "PE_REGISTRY", "create_pe", "pe_names", "register_pe"]

PE_REGISTRY: Registry[type[PositionalEncoding]] = Registry("positional encoding", "peanchor.pes")
PE_REGISTRY.register(PositionalEncoding)  # "none": no positional information
#: The registered names, always current (a live view: a PE registered later is in it).
PE_NAMES = NamesView(PE_REGISTRY)

T = TypeVar("T", bound=type[PositionalEncoding])


@overload
def register_pe(cls: T) -> T: ...
@overload
def register_pe(cls: str) -> Callable[[T], T]: ...


def register_pe(cls: Any) -> Any:
    """Class decorator: register a :class:`PositionalEncoding` subclass under its ``name``. (The older spelling
    ``@register_pe("name")``, which sets ``name``, still works.)

    Returns:
        ``cls`` itself, now registered; given a name (the older spelling), the decorator that registers a class
        under it.
    """
    if isinstance(cls, str):
        return PE_REGISTRY.register(name=cls)
    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise TypeError(f"register_pe takes a PositionalEncoding subclass, got {cls!r}")
    if "name" not in vars(cls):
        raise TypeError(f"{cls.__name__} needs its own name (name = '...') to be registered")
    return PE_REGISTRY.register(cls)


def pe_names() -> tuple[str, ...]:
    """Every registered positional encoding, now."""
    return PE_REGISTRY.names()


def create_pe(name: str, ctx: PEContext, **kwargs: Any) -> PositionalEncoding:
    """Build the PE registered as ``name``; an unknown name raises a ``ValueError`` listing the valid ones.

    Returns:
        A new instance of the registered :class:`PositionalEncoding` subclass.
    """
    cls = PE_REGISTRY.lookup(name)
    params = list(inspect.signature(cls.__init__).parameters.values())[2:]  # after self and ctx
    takes = [p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    unknown = sorted(set(kwargs) - set(takes))
    if unknown and not any(p.kind == p.VAR_KEYWORD for p in params):
        can = f"it takes {', '.join(takes)}" if takes else "it takes no options"
        raise ValueError(f"positional encoding {name!r} cannot take {', '.join(unknown)}; {can}")
    try:
        return cls(ctx, **kwargs)
    except TypeError as e:
        raise ValueError(f"bad options for positional encoding {name!r}: {e}") from None
