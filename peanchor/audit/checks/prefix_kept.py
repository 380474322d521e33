"""Check 6, ``prefix_kept``: the prefix tokens (CLS, registers, distillation) are present, have their own table
rows or none as configured, and are not rotated.

Present: the residual stream leaving block 0 has prefix + patch tokens, as many prefix tokens as the config
says (timm PR #2676 dropped CLS and registers when ``pos_embed='none'``). Rows: the table the pass adds has as
many prefix rows as configured. Not rotated: the model's own rotation hands prefix tokens back unchanged.

On timm and transformers models the tokens are those the model's own forward hands block 0 (hooks on its own
modules, in the audit's dtype), and its prefix tokens must also equal the declared ones: the prefix parameters
(``cls_token``, ``dist_token``, ``reg_token``; transformers' CLS, distillation and register tokens) with their
table rows where they get them (Megatron-LM PR #6260: CLS never got its row). The table's rows are counted on the
model's own table parameter. That their rotation leaves them alone is read by ``reference_parity`` there (its
reference rotates the patch slots only).

Imports: torch.
"""

from __future__ import annotations

import torch

from peanchor.audit.probes import captured, max_diff, random_images, tolerance, watcher
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "prefix_kept"


def check(subject: AuditSubject) -> CheckResult:
    claim, hooks = subject.claim, subject.hooks
    n = hooks.grid[0] * hooks.grid[1]
    images = random_images(1, subject.size())
    if watcher(subject) is not None:
        return _own(subject, images, n)
    stream = captured(subject.model, images, "blocks.{k}.residual")  # (1, T, D)
    have = stream.shape[1] - n
    if have != claim.num_prefix:
        return CheckResult(NAME, "fail", float(have), f"block 0 passes on {have} prefix token(s); the config has "
                           f"{claim.num_prefix}")  # fmt: skip
    text = f"{have} prefix token(s) through block 0"
    if "pe.table" in hooks.points:
        table = captured(subject.model, images, "pe.table")
        rows = 0 if table.prefix is None else table.prefix.shape[1]
        if claim.prefix_rows is not None and rows != claim.prefix_rows:
            return CheckResult(NAME, "fail", float(rows), f"{text}; the table has {rows} prefix row(s), the config "
                               f"{claim.prefix_rows}")  # fmt: skip
        text += f"; {rows} prefix table row(s), as configured"
    if "rope.tables" in hooks.points and subject.rotate is not None and have:
        t = torch.randn(1, hooks.num_heads, have + n, 2 * len(hooks.planes), generator=torch.Generator().manual_seed(1))
        moved = max(float((subject.rotate(t, layer)[:, :, :have] - t[:, :, :have]).abs().max())
                    for layer in range(hooks.depth))  # fmt: skip
        if moved > 1e-6:
            return CheckResult(NAME, "fail", moved, f"{text}; the rotation moves them by up to {moved:.3g}")
        text += "; not rotated"
    return CheckResult(NAME, "pass", float(have), text)


def _own(subject: AuditSubject, images: torch.Tensor, n: int) -> CheckResult:
    """The check on the model's own forward: the tokens it hands block 0 against the declared prefix tokens."""
    obs, claim = watcher(subject), subject.claim
    seen = obs.entry(images)
    tokens = seen.tokens[0]  # (1, P + N, D)
    have = tokens.shape[1] - n
    if have != claim.num_prefix:
        return CheckResult(NAME, "fail", float(have), f"the model's own forward hands block 0 {have} prefix "
                           f"token(s); the config has {claim.num_prefix}")  # fmt: skip
    text = f"{have} prefix token(s) enter block 0 in the model's own forward"
    if have:
        declared = obs.reference_embedding(seen.tables["patches"], subject.grid)[:, :have]  # (1, P, D)
        gap, tol = max_diff(tokens[:, :have], declared), tolerance(1e-4, obs.dtype)
        if gap > tol:
            return CheckResult(NAME, "fail", gap, f"{text}, {gap:.2g} (relative) from the declared prefix tokens "
                               "and their table rows")  # fmt: skip
        text += f", {gap:.2g} from the declared ones"
    table = obs.tables()
    if table:
        rows = table[0].shape[-2] - obs.native_grid[0] * obs.native_grid[1]
        if claim.prefix_rows is not None and rows != claim.prefix_rows:
            return CheckResult(NAME, "fail", float(rows), f"{text}; the table has {rows} prefix row(s), the config "
                               f"{claim.prefix_rows}")  # fmt: skip
        text += f"; {rows} prefix table row(s), as configured"
    return CheckResult(NAME, "pass", float(have), text)


CHECKS.register(Check(NAME, "CLS and registers are present, have their configured table rows, and are not rotated", check))
