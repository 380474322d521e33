"""Check 2, ``position_reaches``: the slot reaches the tokens. Layer-0 tokens of constant images differ only by
what the PE added, so a linear probe decodes each token's (row, col) from them: held-out R², high for a table or
a sin-cos code. A rotary PE acts on q and k only and gives ≈ 0 here by construction, so for RoPE the attention
logits are read instead (``rotary_relative``).

Imports: nothing else from peanchor (the audit's own modules).
"""

from __future__ import annotations

from peanchor.audit.probes import constant_images, layer0_tokens, probe_r2
from peanchor.audit.registry import register_check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "position_reaches"
#: R² at or above which the slot is said to reach the tokens; below FAIL_BELOW it does not.
PASS_AT, FAIL_BELOW = 0.5, 0.2
IMAGES = 8


@register_check(NAME, "layer-0 tokens of constant images carry their slot (probe R²)")
def check(subject: AuditSubject) -> CheckResult:
    kind = subject.claim.kind
    if kind not in ("learned table", "sin-cos"):
        why = {"rotary": "a rotary PE leaves the tokens alone by construction (rotary_relative reads the logits)",
               "relative bias": "a relative bias acts on the attention logits only",
               "conditional": "a conditional PE acts after block 0",
               "none": "the model has no PE (no_hidden_position checks the slots carry nothing)"}.get(kind, kind)
        return CheckResult(NAME, "n/a", None, why)
    r2 = probe_r2(layer0_tokens(subject.model, constant_images(IMAGES, subject.size())), subject.grid)
    status = "pass" if r2 >= PASS_AT else "warn" if r2 >= FAIL_BELOW else "fail"
    return CheckResult(NAME, status, r2, f"probe R² {r2:.3f} on layer-0 tokens of {IMAGES} constant images "
                       f"(pass ≥ {PASS_AT}, fail < {FAIL_BELOW})")  # fmt: skip
