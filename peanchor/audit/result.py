"""What an audit returns: one :class:`CheckResult` per check and the :class:`AuditReport` that holds them.

A check's status is ``pass``, ``warn``, ``fail`` or ``n/a`` (it does not apply to this model; the message says
why). ``measured`` is the number behind the verdict (None where there is none), ``message`` one line saying what
was measured against what.

Imports: :mod:`peanchor.core.fileio` (the JSON file).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peanchor.core.fileio import write_json

__all__ = ["STATUSES", "AuditReport", "CheckResult"]

STATUSES = ("pass", "warn", "fail", "n/a")


@dataclass(frozen=True)
class CheckResult:
    """One check's verdict: its name, status, the measured value and a one-line message."""

    name: str
    status: str
    measured: float | None
    message: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"status {self.status!r}: expected one of {', '.join(STATUSES)}")

    def to_dict(self) -> dict[str, Any]:
        value = None if self.measured is None or not math.isfinite(self.measured) else float(self.measured)
        return {"name": self.name, "status": self.status, "measured": value, "message": self.message}


@dataclass
class AuditReport:
    """Every check's result for one model. ``passed`` is True when no check failed (warn and n/a pass)."""

    model: str
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    timings: dict[str, float] = field(default_factory=dict)  # check name → its seconds (where the time goes)

    @property
    def passed(self) -> bool:
        return all(c.status != "fail" for c in self.checks)

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; the checks: {', '.join(c.name for c in self.checks)}")

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "passed": self.passed, "seconds": round(self.seconds, 3),
                "checks": [c.to_dict() for c in self.checks]}  # fmt: skip

    def save(self, path: str | Path) -> Path:
        """The report as JSON at ``path`` (an atomic write)."""
        path = Path(path)
        write_json(path, self.to_dict())
        return path

    def table(self) -> str:
        """One line per check: its name, status, measured value and message."""
        width = max([len(c.name) for c in self.checks] + [5])
        lines = [f"{'check':<{width}}  status  measured    message"]
        for c in self.checks:
            value = "-" if c.measured is None else f"{c.measured:.3g}"
            lines.append(f"{c.name:<{width}}  {c.status:<6}  {value:<10}  {c.message}")
        verdict = "passed" if self.passed else f"FAILED ({sum(c.status == 'fail' for c in self.checks)} checks)"
        lines.append(f"{self.model}: {verdict} in {self.seconds:.1f} s")
        return "\n".join(lines)
