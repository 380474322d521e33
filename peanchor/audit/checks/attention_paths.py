"""Check 7, ``attention_paths``: the fused attention (SDPA) and the eager one (the path that hands out the
attention weights) give the same logits and tokens, to 1e-5 relative, where both exist.

On timm and transformers models both are the model's own forward (hooks on its own modules, in the audit's dtype:
the tolerance is 5e-2 in float16 and bfloat16): timm's ``fused_attn`` switched off, transformers'
``attn_implementation`` set to ``eager`` for the second pass. On peanchor's ViT both are its own pass.

Imports: torch.
"""

from __future__ import annotations

import torch

from peanchor.audit.probes import PROBES, max_diff, random_images, tolerance, watcher
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "attention_paths"
TOLERANCE = 1e-5


def check(subject: AuditSubject) -> CheckResult:
    model = subject.model
    if not model.has_attention_weights:
        return CheckResult(NAME, "n/a", None, f"{subject.hooks.model} has one attention path only")
    images = random_images(PROBES, subject.size())
    obs = watcher(subject)
    if obs is not None and obs.missing() is None:
        return _own(obs, images.to(obs.dtype))
    with torch.no_grad():
        fused = model.forward_intermediates(images)
        eager = model.forward_intermediates(images, attention=lambda layer, weights: None)
    diff = max(max_diff(eager.logits, fused.logits), max_diff(eager.tokens, fused.tokens))
    status = "pass" if diff <= TOLERANCE else "fail"
    return CheckResult(NAME, status, diff, f"eager and fused passes {diff:.2g} apart (relative; pass ≤ {TOLERANCE:g})")


def _own(obs: object, images: torch.Tensor) -> CheckResult:
    """The check on the model's own forward: its fused pass against its eager one."""
    fused, eager = obs.plain(images), obs.run(images, eager=True)  # type: ignore[attr-defined]
    for seen in (fused, eager):
        if seen.error is not None:
            raise seen.error
    diff = max_diff(eager.logits, fused.logits)
    for a, b in zip(eager.tokens, fused.tokens):
        diff = max(diff, max_diff(a, b))
    tol = tolerance(TOLERANCE, obs.dtype)  # type: ignore[attr-defined]
    status = "pass" if diff <= tol else "fail"
    return CheckResult(NAME, status, diff, f"the model's own eager and fused passes {diff:.2g} apart (relative; "
                       f"pass ≤ {tol:g})")  # fmt: skip


CHECKS.register(Check(NAME, "fused (SDPA) and eager attention agree to 1e-5", check))
