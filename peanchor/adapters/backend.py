"""The backends: how a model of a library is recognised, wrapped behind the analysis interface and audited.

A backend is one registered class (``@BACKENDS.register``, its ``name`` the registry key) that says

* ``accepts(model)``: whether a model object of its library is one it wraps (checked without importing the
  library when the model is not of it);
* ``wrap(model, img_size=None, model_args=None)``: the model behind
  :class:`~peanchor.models.interface.AnalysisInterface`, in the model's own train/eval mode;
* ``wraps(wrapped)``: whether an analysis-interface object is its wrapper (the audit asks);
* ``audit_subject(wrapped)``: the :class:`~peanchor.audit.subject.AuditSubject` of its wrapper: the claim read off
  the library's own config, the model's own forward, its observer; and ``signature(wrapped)``, what decides its
  PE's behaviour (the audit zoo audits one model per signature).

:func:`wrap_model` (what ``peanchor.analyze``, ``peanchor.audit`` and the loaders call) and :func:`backend_of`
are the only places that choose a backend; nothing else names one. The built-in backends are the modules this
package imports (:data:`BUILTIN`); a plug-in registers its own the same way (entry-point group
``peanchor.backends``). docs/ARCHITECTURE.md, "How to add a backend", walks through one.

Imports: :mod:`peanchor.core.registry`, :mod:`peanchor.models` (interface), :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar

from peanchor.core.errors import ConfigError, PeanchorError
from peanchor.models.interface import AnalysisInterface
from peanchor.core.registry import Registry

__all__ = ["BACKENDS", "BUILTIN", "Backend", "audit_subject", "backend_of", "require_library", "wrap_model"]


class Backend:
    """One library's models behind the analysis interface (see the module docstring)."""

    name: ClassVar[str]
    #: What it wraps, for the line that refuses a model no backend accepts.
    summary: ClassVar[str]

    def accepts(self, model: Any) -> bool:
        raise NotImplementedError

    def wrap(self, model: Any, *, img_size: int | None = None,
             model_args: dict[str, Any] | None = None) -> AnalysisInterface:  # fmt: skip
        raise NotImplementedError

    def wraps(self, wrapped: Any) -> bool:
        raise NotImplementedError

    def audit_subject(self, wrapped: Any) -> Any:
        raise NotImplementedError

    def signature(self, wrapped: Any) -> str:
        """What decides the behaviour of its PE, not the model's size (the audit zoo audits one model per
        signature)."""
        return f"{wrapped.pe_name} prefix={wrapped.num_prefix}"


def _check(cls: Any) -> None:
    for method in ("accepts", "wrap", "wraps", "audit_subject"):
        if getattr(cls, method, None) is getattr(Backend, method):
            raise ValueError(f"a backend implements {method}")


BACKENDS: Registry[Backend] = Registry("backend", "peanchor.backends", make=lambda cls: cls(), check=_check)

#: The modules that register the built-in backends, in the order they are asked (the first that accepts wins).
BUILTIN = ("peanchor.adapters.peanchor_vit", "peanchor.adapters.timm_naflex", "peanchor.adapters.timm_vit",
           "peanchor.adapters.timm_beit", "peanchor.adapters.hf_vit")  # fmt: skip


def _backends() -> list[Backend]:
    """The registered backends, the built-in ones first in :data:`BUILTIN`'s order (whatever imported them first),
    then the plug-ins' in the order they registered."""
    for module in BUILTIN:
        importlib.import_module(module)
    rank = {module: i for i, module in enumerate(BUILTIN)}
    return sorted(BACKENDS.values(), key=lambda b: rank.get(type(b).__module__, len(rank)))


def backend_of(wrapped: Any) -> Backend | None:
    """The backend whose wrapper ``wrapped`` is (None: none)."""
    return next((b for b in _backends() if b.wraps(wrapped)), None)


def wrap_model(model: Any, img_size: int | None = None, *,
               model_args: dict[str, Any] | None = None) -> AnalysisInterface:  # fmt: skip
    """``model`` behind the analysis interface: an object that already offers it as it is, anything else through
    the first registered backend that accepts it; a model none accepts is one ConfigError line naming what each
    backend wraps."""
    if isinstance(model, AnalysisInterface):
        return model
    backends = _backends()
    for backend in backends:
        if backend.accepts(model):
            return backend.wrap(model, img_size=img_size, model_args=model_args)
    raise ConfigError(f"cannot analyse a {type(model).__module__}.{type(model).__name__}: expected "
                      + "; ".join(f"{b.summary} ({b.name})" for b in backends))  # fmt: skip


def audit_subject(wrapped: Any) -> Any:
    """The :class:`~peanchor.audit.subject.AuditSubject` of a wrapped model, built by its backend; anything else is
    one ConfigError line naming what can be audited."""
    backend = backend_of(wrapped)
    if backend is None:
        raise ConfigError(f"cannot audit a {type(wrapped).__module__}.{type(wrapped).__name__}: peanchor audits "
                          + "; ".join(b.summary for b in _backends()))  # fmt: skip
    return backend.audit_subject(wrapped)


def require_library(name: str, extra: str) -> Any:
    """A backend's library, imported (``timm``, ``transformers``), or one :class:`PeanchorError` line: how to install
    it (``pip install 'peanchor[EXTRA]'``), or why the installed one does not import."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as e:
        if e.name != name:
            raise PeanchorError(f"{name} could not be imported: {e}") from e
        raise PeanchorError(f"{name} is not installed: pip install 'peanchor[{extra}]'") from e

