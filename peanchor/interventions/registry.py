"""Edit kind name → class: :data:`INTERVENTIONS` and the reading of a spec into an edit.

The kinds live in a :class:`peanchor.core.registry.Registry` that reads a kind's name from its ``kind`` (its spec name):
``@INTERVENTIONS.register`` on the class (:func:`register_intervention` is the older spelling), with a live
:func:`names` (a kind registered later, by a researcher's own module or an installed plug-in, is listed at once). ``peanchor/interventions/kinds/`` holds one module per kind; importing
:mod:`peanchor.interventions` imports them all.

Imports: :mod:`peanchor.interventions` (edit, spec), :mod:`peanchor.core.registry`.
"""

from __future__ import annotations

from dataclasses import fields
from typing import TypeVar

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import Edit
from peanchor.interventions.spec import split_spec
from peanchor.core.registry import Registry

__all__ = ["INTERVENTIONS", "edit_from_spec", "names", "register_intervention"]

#: kind → its class (a frozen dataclass subclassing :class:`~peanchor.interventions.edit.Edit`): the common plug-in
#: registry (:mod:`peanchor.core.registry`), so a kind from a researcher's package is found through the entry-point group
#: ``peanchor.interventions``, ``--plugin`` or ``PEANCHOR_PLUGINS`` like every other plug-in.
INTERVENTIONS: Registry[type[Edit]] = Registry("intervention", "peanchor.interventions", name_attribute="kind")

K = TypeVar("K", bound=type[Edit])


def register_intervention(cls: K) -> K:
    """The older spelling of ``@INTERVENTIONS.register``: an edit kind under ``cls.kind`` (its spec name); a name
    registered twice is one line."""
    return INTERVENTIONS.register(cls)


def names() -> tuple[str, ...]:
    """Every registered kind, in registration order (live)."""
    return INTERVENTIONS.names()


def parameters(cls: type[Edit]) -> dict[str, str]:
    """A kind's spec parameters → their rules in words."""
    return {f.name: f.metadata["rule"] for f in fields(cls) if "reader" in f.metadata}  # type: ignore[arg-type]


def edit_from_spec(text: str) -> Edit:
    """One edit from its spec, ``kind:key=value,...``; an unknown kind, key or bad value is one ConfigError line."""
    kind, values = split_spec(text)
    cls = INTERVENTIONS.lookup(kind)  # an unknown kind: one line with the valid ones and the closest
    known = {f.name: f for f in fields(cls) if "reader" in f.metadata}  # type: ignore[arg-type]
    args = {}
    for key, value in values.items():
        f = known.get(key)
        if f is None:
            valid = ", ".join(known) or "none"
            raise ConfigError(f"intervention {kind} has no parameter {key!r}; valid: {valid}")
        try:
            args[key] = f.metadata["reader"](value)
        except ValueError as e:
            raise ConfigError(f"{kind}:{key}={value}: {e}") from None
    try:
        return cls(**args)
    except ValueError as e:  # checks across parameters, in the kind's __post_init__
        raise ConfigError(f"{text}: {e}") from None

