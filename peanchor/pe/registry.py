"""Name → positional-encoding class: :data:`PE_REGISTRY`, a :class:`peanchor.core.registry.Registry` (plug-ins from the
entry-point group ``peanchor.pes``), and :func:`create_pe`.

The built-in PEs are listed here by name and module (:data:`BUILT_IN`) without importing them: this module loads no
torch, so the command line checks a ``--pe`` against the registry itself before torch loads, and the first lookup
of a name imports its module, where its class registers itself (``@PE_REGISTRY.register``; a test keeps the list
and the classes' names equal). A PE of one's own, in a plug-in, registers the same way and needs no line here.
:func:`register_pe` is the older spelling of ``PE_REGISTRY.register`` (it also checks the class is a PE).

Imports: :mod:`peanchor.pe.base` (torch) when a PE is looked up or built, :mod:`peanchor.core.registry`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

from peanchor.core.registry import NamesView, Registry

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.pe.base import PEContext, PositionalEncoding

__all__ = ["BUILT_IN", "PE_NAMES", "PE_REGISTRY", "create_pe", "pe_names", "register_pe"]

#: The built-in PEs in the registry's order: name → the module that defines it (``module:Class`` where the class is
#: not decorated: "none", the interface's own no-op).
BUILT_IN: dict[str, str] = {
    "none": "peanchor.pe.base:PositionalEncoding",
    "ape": "peanchor.pe.absolute", "sincos": "peanchor.pe.absolute", "alibi": "peanchor.pe.alibi",
    "comrope": "peanchor.pe.comrope", "peg": "peanchor.pe.conditional", "factorized": "peanchor.pe.factorized",
    "fourier": "peanchor.pe.fourier", "liere": "peanchor.pe.liere", "relbias": "peanchor.pe.relative",
    "rope": "peanchor.pe.rotary", "rope_mixed": "peanchor.pe.rotary", "rope_ape": "peanchor.pe.rotary_ape",
    "rope_dinov3": "peanchor.pe.rotary_dinov3", "string": "peanchor.pe.string",
}  # fmt: skip


def _check(cls: Any) -> None:
    from peanchor.pe.base import PositionalEncoding

    if not (isinstance(cls, type) and issubclass(cls, PositionalEncoding)):
        raise TypeError(f"a positional encoding is a PositionalEncoding subclass, got {cls!r}")
    if "name" not in vars(cls):
        raise TypeError(f"{cls.__name__} needs its own name (name = '...') to be registered")


PE_REGISTRY: Registry[type[PositionalEncoding]] = Registry("positional encoding", "peanchor.pes", check=_check)
for _name, _module in BUILT_IN.items():
    PE_REGISTRY.register_lazy(_name, _module)
#: The registered names, always current (a live view: a PE registered later is in it).
PE_NAMES = NamesView(PE_REGISTRY)

T = TypeVar("T", bound="type[PositionalEncoding]")


@overload
def register_pe(cls: T) -> T: ...
@overload
def register_pe(cls: str) -> Callable[[T], T]: ...


def register_pe(cls: Any) -> Any:
    """The older spelling of ``@PE_REGISTRY.register``: register a :class:`PositionalEncoding` subclass under its
    ``name``. (``@register_pe("name")``, which sets ``name``, still works.)

    Returns:
        ``cls`` itself, now registered; given a name (the older spelling), the decorator that registers a class
        under it.
    """
    if isinstance(cls, str):
        return PE_REGISTRY.register(name=cls)
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
