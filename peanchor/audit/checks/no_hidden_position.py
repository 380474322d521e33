"""Check 8, ``no_hidden_position``: with its PE removed (``pe_zero``, or every RoPE plane), a model knows nothing
of position.

- It is permutation-equivariant on its patch tokens: permuting the content permutes every layer's tokens the same
  way and leaves the logits alone. A table left over somewhere breaks this.
- Its layer-0 tokens of constant images carry no slot: probe R² ≈ 0. A stem whose padding leaks position through
  the borders breaks this, which equivariance alone cannot see (the permutation acts after the stem).

On timm and transformers models both read the model's own forward (hooks on its own modules,
:mod:`peanchor.audit.observe`, in the audit's dtype): its table parameter zeroed, BEiT's relative bias tables
zeroed and every block handed the rotary table of no rotation (what ``pe_zero`` and ``rope_planes`` remove), the
content permuted by a hook on its patch embedding. Position the model's own code adds besides its declared table (an instance's ``_pos_embed``, an
embeddings' ``forward``) is then what breaks equivariance. On peanchor's ViT the edits act on its own pass.

Imports: torch; :mod:`peanchor.interventions` (the removal edits, random_permutation).
"""

from __future__ import annotations

import torch

from peanchor.audit.probes import (PROBES, constant_images, layer0_tokens, max_diff, probe_r2, random_images, tolerance,
                                   watcher)
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject
from peanchor.interventions import Intervention, random_permutation

NAME = "no_hidden_position"
TOLERANCE = 1e-4
#: The probe R² above which constant images still carry their slot.
R2_MAX = 0.1


def removal(subject: AuditSubject) -> list[str] | None:
    """The edits that remove the model's PE ([] for none), or None when no edit can."""
    points = subject.hooks.points
    if subject.claim.kind in ("relative bias", "conditional") or subject.relative_bias:
        return ["pe_zero"] if "pe.bias" in points else None  # pe_zero drops the bias (and zeroes a table beside it)
    return (["pe_zero"] if "pe.table" in points else []) + (["rope_planes"] if "rope.tables" in points else [])


def _without_pe(subject: AuditSubject, edits: list[str], perm: torch.Tensor | None = None) -> Intervention:
    """The pass without the PE: the removal edits, or α = 0 for a PE with no hook point that declares that α
    scales it (a plug-in's ``add``, say)."""
    declared = subject.declares
    by_alpha = not edits and subject.claim.kind != "none" and declared is not None and declared.alpha is not None
    if edits:
        return Intervention.parse(edits, token_perm=perm)
    return Intervention(token_perm=perm, pe_scale=0.0 if by_alpha else 1.0)


def check(subject: AuditSubject) -> CheckResult:
    edits = removal(subject)
    if edits is None:
        return CheckResult(NAME, "n/a", None, f"no edit removes a {subject.claim.kind}")
    model, grid = subject.model, subject.grid
    n = grid[0] * grid[1]
    images = random_images(PROBES, subject.size())
    perm = random_permutation(n, generator=torch.Generator().manual_seed(0))
    if watcher(subject) is not None:
        return _own(subject, images, perm)
    with torch.no_grad():
        plain = model.forward_intermediates(images, _without_pe(subject, edits))
        moved = model.forward_intermediates(images, _without_pe(subject, edits, perm))
    gap = max(max_diff(moved.tokens, plain.tokens[:, :, perm]), max_diff(moved.logits, plain.logits))
    alpha = _without_pe(subject, edits).pe_scale == 0.0
    removed = "+".join(edits) or ("α = 0 (the PE declares that α scales it)" if alpha else "nothing to remove")
    if gap > TOLERANCE:
        return CheckResult(NAME, "fail", gap, f"under {removed}, permuted content moves tokens/logits by {gap:.2g}: "
                           "position is hidden somewhere")  # fmt: skip
    iv = _without_pe(subject, edits)
    r2 = probe_r2(layer0_tokens(model, constant_images(8, subject.size()), iv), grid)
    status = "pass" if r2 <= R2_MAX else "fail"
    return CheckResult(NAME, status, r2, f"under {removed}: equivariant to {gap:.2g}; constant images' layer-0 probe "
                       f"R² {r2:.3f} (pass ≤ {R2_MAX})")  # fmt: skip


def _own(subject: AuditSubject, images: torch.Tensor, perm: torch.Tensor) -> CheckResult:
    """The check on the model's own forward: table zeroed, rotation the identity, content permuted by a hook."""
    obs = watcher(subject)
    tol, p = tolerance(TOLERANCE, obs.dtype), obs.prefix
    images = images.to(obs.dtype)
    plain = obs.run(images, eager=False, remove=True)
    moved = obs.run(images, eager=False, remove=True, perm=perm)
    for seen in (plain, moved):
        if seen.error is not None:
            raise seen.error
    gap = max_diff(moved.logits, plain.logits)
    for a, b in zip(moved.tokens, plain.tokens):  # (B, P + N, D) each: the prefix stays, the patches move
        gap = max(gap, max_diff(a[:, p:], b[:, p:][:, perm]), max_diff(a[:, :p], b[:, :p]) if p else 0.0)
    removed = "its table zeroed and its rotation the identity in the model's own forward"
    removed += " (and its relative bias tables zeroed)" if obs.bias_tables() else ""
    if gap > tol:
        return CheckResult(NAME, "fail", gap, f"with {removed}, permuted content moves tokens/logits by {gap:.2g}: "
                           "position is hidden somewhere")  # fmt: skip
    tokens = obs.entry(constant_images(8, subject.size()), remove=True).tokens[0][:, p:].float()  # (B, N, D)
    r2 = probe_r2(tokens, subject.grid)
    status = "pass" if r2 <= R2_MAX else "fail"
    return CheckResult(NAME, status, r2, f"with {removed}: equivariant to {gap:.2g} (pass ≤ {tol:g}); constant "
                       f"images' probe R² {r2:.3f} on the tokens entering block 0 (pass ≤ {R2_MAX})")  # fmt: skip


CHECKS.register(Check(NAME, "without its PE the model is permutation-equivariant and constant images carry no slot", check))
