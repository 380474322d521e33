"""The checks, by name, in the order an audit runs and prints them: :func:`register_check` adds one.

A check is a function ``(subject) -> CheckResult``; ``checks/`` holds one module per check.

Imports: nothing else from peanchor (its own package's result type only).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from peanchor.audit.result import CheckResult

__all__ = ["CHECKS", "Check", "register_check"]


@dataclass(frozen=True)
class Check:
    name: str
    title: str  # one line: what it proves
    run: Callable[..., CheckResult]  # (AuditSubject) -> CheckResult


#: name → check, in registration order (the order of ``checks/__init__.py``).
CHECKS: dict[str, Check] = {}


def register_check(name: str, title: str) -> Callable[[Callable[..., CheckResult]], Callable[..., CheckResult]]:
    def wrap(fn: Callable[..., CheckResult]) -> Callable[..., CheckResult]:
        if name in CHECKS:
            raise ValueError(f"audit check {name!r} is registered twice")
        CHECKS[name] = Check(name, title, fn)
        return fn

    return wrap
