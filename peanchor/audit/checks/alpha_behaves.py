"""Check 9, ``alpha_behaves``: the PE scale does what it says. α = 1 is the model as it is (the analysis pass
equals the model's own forward), and α = 0 equals removing the PE (``pe_zero``, or every RoPE plane) where both
apply.

This check is by design about peanchor's intervention path (α, ``pe_zero``, ``rope_planes`` act there): on timm
models that is the adapter's own assembly of the prefix tokens, table and rotary tables. Its α = 1 pass is
compared with the model's own forward (on timm and transformers: the pass :mod:`peanchor.audit.observe` records,
float32), so a fault in the code the model calls (an instance's ``_pos_embed``, a patched library function the
adapter does not share) parts the two and fails it; the other checks read the model's own forward themselves.

Imports: torch; :mod:`peanchor.interventions`.
"""

from __future__ import annotations

import torch

from peanchor.audit.checks.no_hidden_position import removal
from peanchor.audit.probes import PROBES, max_diff, random_images
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject
from peanchor.interventions import Intervention

NAME = "alpha_behaves"
TOLERANCE = 1e-5


def check(subject: AuditSubject) -> CheckResult:
    if not subject.scalable:
        return CheckResult(NAME, "n/a", None, f"α means nothing for a {subject.claim.kind} PE")
    model = subject.model
    images = random_images(PROBES, subject.size())
    with torch.no_grad():
        one = model.forward_intermediates(images, Intervention(pe_scale=1.0))
        if subject.observer is not None:
            identity = max_diff(one.logits, subject.observer.plain(images).logits)
            said = f"α = 1: {identity:.2g} from the model's own forward"
        elif subject.native_forward is None:
            identity, said = float("nan"), "α = 1 not compared (no native forward)"
        else:
            identity = max_diff(one.logits, subject.native_forward(images))
            said = f"α = 1: {identity:.2g} from the model's own forward"
        if identity > TOLERANCE:
            return CheckResult(NAME, "fail", identity, f"α = 1 is {identity:.2g} from the model's own forward")
        edits = removal(subject)
        if not edits:
            return CheckResult(NAME, "pass", identity, f"{said}; no edit to compare α = 0 "
                               "with")  # fmt: skip
        zero = model.forward_intermediates(images, Intervention(pe_scale=0.0))
        removed = model.forward_intermediates(images, Intervention.parse(edits))
    gap = max(max_diff(zero.logits, removed.logits), max_diff(zero.tokens, removed.tokens))
    status = "pass" if gap <= TOLERANCE else "fail"
    return CheckResult(NAME, status, gap, f"{said}; α = 0 is {gap:.2g} "
                       f"from {'+'.join(edits)} (relative; pass ≤ {TOLERANCE:g})")  # fmt: skip


CHECKS.register(Check(NAME, "α = 1 is the identity and α = 0 equals removing the PE", check))
