"""``audit(model)``: every registered check on one model, in eval mode and without gradients, as an
:class:`~peanchor.audit.result.AuditReport`.

A check that raises a :class:`~peanchor.core.errors.PeanchorError` (an edit the model cannot take, say) is reported
``n/a`` with that line as its reason. Any other exception fails the check, with the exception as its message,
and the other checks still run: a model whose own code breaks on a probe is what an audit is for.

Imports: torch; :mod:`peanchor.api.analysis` (wrap_model: timm and transformers models behind the analysis interface),
:mod:`peanchor.adapters` (backend: each backend's audit subject).
"""

from __future__ import annotations

import copy
import time
from collections.abc import Iterable
from typing import Any

import torch

from peanchor.api.analysis import wrap_model
import peanchor.audit.checks  # noqa: F401  (registers every check)
from peanchor.audit.registry import CHECKS
from peanchor.audit.result import AuditReport, CheckResult
from peanchor.adapters.backend import audit_subject
from peanchor.core.errors import ConfigError, PeanchorError

__all__ = ["audit"]

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def audit(model: Any, *, checks: Iterable[str] | None = None, name: str | None = None,
          dtype: str | torch.dtype | None = None) -> AuditReport:
    """Audit ``model`` (a peanchor ViT, a timm ViT/Eva or a transformers vision model, wrapped or not): the
    checks named in ``checks`` (default: all of :data:`~peanchor.audit.registry.CHECKS`, in order).
    ``dtype`` (``fp32``, ``bf16``, ``fp16``): the dtype the checks that read a timm or transformers model's own
    forward run it in (a copy where it differs from the model's own; default: the dtype of its parameters), with
    tolerances by dtype; the checks of peanchor's intervention path (``alpha_behaves``, ``resampling``'s
    ``pe_resample``) and peanchor's own ViT run in float32.

    Returns:
        The :class:`~peanchor.audit.result.AuditReport`: ``.passed`` and one result per check.
    """
    run_dtype = _dtype(dtype) if dtype is not None else None
    chosen = list(CHECKS) if checks is None else list(checks)
    unknown = [c for c in chosen if c not in CHECKS]
    if unknown:
        raise ConfigError(f"unknown audit check(s) {', '.join(unknown)}; the checks: {', '.join(CHECKS)}")
    wrapped = wrap_model(model)
    own = next((p.dtype for p in wrapped.parameters() if p.is_floating_point()), torch.float32)
    run_dtype = run_dtype or (own if own in DTYPES.values() else torch.float32)
    # The other checks' probes and thresholds are made for float32: a model in another dtype is audited by them
    # on a float32 copy (the caller's model stays as it is).
    subject = audit_subject(wrapped if own == torch.float32 else copy.deepcopy(wrapped).float())
    if subject.observer is not None and run_dtype != torch.float32:
        subject.dtype = run_dtype
        in_dtype = wrapped if run_dtype == own else copy.deepcopy(wrapped).to(run_dtype).eval()
        subject.parity_observer = type(subject.observer)(in_dtype)
    report = AuditReport(name or subject.name)
    start = time.perf_counter()
    training = wrapped.training
    wrapped.eval()
    subject.model.eval()
    try:
        with torch.no_grad():
            for check in chosen:
                if subject.claim.kind == "undeclared":
                    report.checks.append(CheckResult(check, "n/a", None, "the PE declares nothing to check"))
                    continue
                began = time.perf_counter()
                try:
                    report.checks.append(CHECKS[check].run(subject))
                except PeanchorError as e:
                    report.checks.append(CheckResult(check, "n/a", None, str(e)))
                except Exception as e:  # noqa: BLE001  (the model's code failed on the probe: a finding)
                    line = f"{type(e).__name__}: {e}".splitlines()[0]
                    report.checks.append(CheckResult(check, "fail", None, f"the check raised {line}"))
                report.timings[check] = time.perf_counter() - began
    finally:
        wrapped.train(training)
    report.seconds = time.perf_counter() - start
    return report




def _dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if dtype not in DTYPES:
        raise ConfigError(f"dtype {dtype!r} is not supported; the audit runs in {', '.join(DTYPES)}")
    return DTYPES[str(dtype)]
