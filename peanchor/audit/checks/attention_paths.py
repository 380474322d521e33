"""Check 7, ``attention_paths``: the fused attention (SDPA) and the eager one (the path that hands out the
attention weights) give the same logits and tokens, to 1e-5 relative, where both exist.

Imports: torch.
"""

from __future__ import annotations

import torch

from peanchor.audit.probes import max_diff, random_images
from peanchor.audit.registry import register_check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "attention_paths"
TOLERANCE = 1e-5


@register_check(NAME, "fused (SDPA) and eager attention agree to 1e-5")
def check(subject: AuditSubject) -> CheckResult:
    model = subject.model
    if not model.has_attention_weights:
        return CheckResult(NAME, "n/a", None, f"{subject.hooks.model} has one attention path only")
    images = random_images(2, subject.size())
    with torch.no_grad():
        fused = model.forward_intermediates(images)
        eager = model.forward_intermediates(images, attention=lambda layer, weights: None)
    diff = max(max_diff(eager.logits, fused.logits), max_diff(eager.tokens, fused.tokens))
    status = "pass" if diff <= TOLERANCE else "fail"
    return CheckResult(NAME, status, diff, f"eager and fused passes {diff:.2g} apart (relative; pass ≤ {TOLERANCE:g})")
