"""Check 2, ``position_reaches``: the slot reaches the tokens. Layer-0 tokens of constant images differ only by
what the PE added, so a linear probe decodes each token's (row, col) from them: held-out R², high for a table or
a sin-cos code. A rotary PE acts on q and k only and gives ≈ 0 here by construction, so for RoPE the attention
logits are read instead (``rotary_relative``).

On timm and transformers models the tokens are those the model's own forward hands block 0 (hooks on its own
modules, :mod:`peanchor.audit.observe`, in the audit's dtype), so a fault in the code the model calls (an
instance's ``_pos_embed``, an embeddings' ``forward``) is what the probe reads. On peanchor's ViT they are block
0's first-norm output of its own pass.

Imports: nothing else from peanchor (the audit's own modules).
"""

from __future__ import annotations

from peanchor.audit.probes import constant_images, layer0_tokens, probe_r2, watcher
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "position_reaches"
#: R² at or above which the slot is said to reach the tokens; below FAIL_BELOW it does not.
PASS_AT, FAIL_BELOW = 0.5, 0.2
IMAGES = 8


def check(subject: AuditSubject) -> CheckResult:
    kind = subject.claim.kind
    if kind not in ("learned table", "sin-cos"):
        why = {"rotary": "a rotary PE leaves the tokens alone by construction (rotary_relative reads the logits)",
               "relative bias": "a relative bias acts on the attention logits only",
               "conditional": "a conditional PE acts after block 0",
               "none": "the model has no PE (no_hidden_position checks the slots carry nothing)"}.get(kind, kind)
        return CheckResult(NAME, "n/a", None, why)
    images, obs = constant_images(IMAGES, subject.size()), watcher(subject)
    if obs is None:
        tokens, read = layer0_tokens(subject.model, images), "layer-0 tokens"
    else:
        tokens = obs.entry(images).tokens[0][:, obs.prefix :].float()  # (B, N, D)
        read = "the tokens the model's own forward hands block 0"
    r2 = probe_r2(tokens, subject.grid)
    status = "pass" if r2 >= PASS_AT else "warn" if r2 >= FAIL_BELOW else "fail"
    return CheckResult(NAME, status, r2, f"probe R² {r2:.3f} on {read} of {IMAGES} constant images "
                       f"(pass ≥ {PASS_AT}, fail < {FAIL_BELOW})")  # fmt: skip


CHECKS.register(Check(NAME, "layer-0 tokens of constant images carry their slot (probe R²)", check))
