"""``peanchor audit``: a seconds-long check that a model's positional encoding does what its config says
(docs/audit.md). No dataset: the probes are built (constant images, random images, one bright patch).

``peanchor.audit(model)`` returns an :class:`AuditReport` (``.passed``, ``.checks``: name, status, measured value,
message). The package itself is callable, ``peanchor.audit(model)``, because Python binds the imported package to
``peanchor.audit`` and a function of that name would be hidden behind it.

Imports: its own modules.
"""

import sys
import types
from typing import Any

from peanchor.audit.registry import CHECKS, Check, register_check
from peanchor.audit.result import STATUSES, AuditReport, CheckResult
from peanchor.audit.runner import audit

__all__ = ["CHECKS", "STATUSES", "AuditReport", "Check", "CheckResult", "audit", "register_check"]


class _CallablePackage(types.ModuleType):
    def __call__(self, model: Any, **kwargs: Any) -> AuditReport:
        return audit(model, **kwargs)


sys.modules[__name__].__class__ = _CallablePackage
