"""The checks, by name, in the order an audit runs and prints them: :data:`CHECKS`, a
:class:`peanchor.core.registry.Registry` of :class:`Check` (plug-ins from the entry-point group
``peanchor.audit_checks``). A check says its name: ``CHECKS.register(Check("my_check", "what it proves", fn))``, the
one verb of every registry (each module of ``checks/`` ends with it); :func:`register_check` is the older decorator.

A check's function is ``(subject) -> CheckResult``; ``checks/`` holds one module per check.

Imports: :mod:`peanchor.core.registry` (its own package's result type too).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from peanchor.audit.result import CheckResult
from peanchor.core.registry import Registry

__all__ = ["CHECKS", "Check", "register_check"]


@dataclass(frozen=True)
class Check:
    name: str
    title: str  # one line: what it proves
    run: Callable[..., CheckResult]  # (AuditSubject) -> CheckResult


#: name → check, in registration order (the order of ``checks/__init__.py``).
CHECKS: Registry[Check] = Registry("audit check", "peanchor.audit_checks")


def register_check(name: str, title: str) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    """Decorator: ``fn`` registered as the check ``name`` (``CHECKS.register(Check(name, title, fn))``)."""

    def wrap(fn: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        CHECKS.register(Check(name, title, fn))
        return fn

    return wrap
