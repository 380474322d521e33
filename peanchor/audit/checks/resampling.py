"""Check 5, ``resampling``: moving the code to another grid is faithful.

- To the same grid it is the identity: the logits equal the plain pass's.
- Between grids of equal token count (4x4 → 2x8) it really resamples (timm PR #2737 skipped it): the table's rows
  equal the native table resampled by ``F.interpolate`` (bicubic, the documented mode) and differ from the native
  rows; a rotary table differs from the native one.
- A backend with its own interpolation path (timm's ``dynamic_img_size``, transformers'
  ``interpolate_pos_encoding``) agrees with ``pe_resample`` at the documented mode (``own_resample``).

The first two are by design about peanchor's intervention (``pe_resample``, which the analyses use); the third
ties it to the model's own forward at two non-square grids, so a fault in the model's own interpolation (a patched
``resample_abs_pos_embed`` or ``interpolate_pos_encoding``) fails here, and ``axes_in_order`` and
``reference_parity`` read that path against the declared table themselves. These passes run in float32.

Imports: torch; :mod:`peanchor.interventions` (pe_resample).
"""

from __future__ import annotations

import torch

from peanchor.audit.checks.axes_in_order import reference_rows
from peanchor.audit.probes import PROBES, captured, max_diff, random_images
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject
from peanchor.interventions import Intervention

NAME = "resampling"
TOLERANCE = 1e-5


def same_count_grid(grid: tuple[int, int]) -> tuple[int, int]:
    """Another grid with ``rows·cols`` slots (rows halved and columns doubled where they can be, else 1 row)."""
    rows, cols = grid
    if rows % 2 == 0:
        return rows // 2, cols * 2
    if cols % 2 == 0:
        return rows * 2, cols // 2
    return 1, rows * cols


def check(subject: AuditSubject) -> CheckResult:
    hooks = subject.hooks
    if "input.grid" not in hooks.points:
        return CheckResult(NAME, "n/a", None, f"{hooks.model} runs at its own grid only (no input.grid hook point)")
    model, grid = subject.model, subject.grid
    images = random_images(PROBES, subject.size())
    with torch.no_grad():
        plain = model.forward_intermediates(images).logits
        same = model.forward_intermediates(images, Intervention.parse(f"pe_resample:grid={grid[0]}x{grid[1]}")).logits
    identity = max_diff(same, plain)
    if identity > TOLERANCE:
        return CheckResult(NAME, "fail", identity, f"resampling to the same grid changes the logits by {identity:.2g}")
    other = same_count_grid(grid)
    edit = Intervention.parse(f"pe_resample:grid={other[0]}x{other[1]}").edits
    moved = random_images(1, subject.size(other))
    text = f"same grid: logits {identity:.2g} apart; {grid[0]}x{grid[1]} → {other[0]}x{other[1]}"
    if "pe.table" in hooks.points:
        native = captured(model, random_images(1, subject.size()), "pe.table").patches
        table = captured(model, moved, "pe.table", *edit).patches
        if table.shape != native.shape or not (table - native).abs().max() > 0:
            return CheckResult(NAME, "fail", 0.0, f"{text}: the table's rows are the native rows (not resampled)")
        err = max_diff(table, reference_rows(native, grid, other))
        if err > TOLERANCE:
            return CheckResult(NAME, "fail", err, f"{text}: rows {err:.2g} from bicubic F.interpolate")
        text += f": rows {err:.2g} from bicubic F.interpolate"
    elif "rope.tables" in hooks.points:
        native = captured(model, random_images(1, subject.size()), "rope.tables")
        tables = captured(model, moved, "rope.tables", *edit)
        if torch.equal(tables.cos, native.cos) and torch.equal(tables.sin, native.sin):
            return CheckResult(NAME, "fail", 0.0, f"{text}: the rotary tables are the native ones (not rebuilt)")
        text += ": rotary tables rebuilt"
    own = subject.own_resample
    if own is not None:
        err = own()
        if err > TOLERANCE:
            return CheckResult(NAME, "fail", err, f"{text}; the model's own interpolation is {err:.2g} from pe_resample")
        text += f"; own interpolation {err:.2g} from pe_resample"
    return CheckResult(NAME, "pass", identity, text)


CHECKS.register(Check(NAME, "same grid: identity; equal token counts: really resampled; own path agrees", check))
