"""Check 4, ``axes_in_order``: on a non-square grid (rows ≠ columns) the code follows the token grid, rows being
the image's height.

- The patch tokens are in row-major order: an image with one bright patch at (r, c) changes slot ``r·W + c`` of
  the layer-0 tokens most (the PE removed where an edit can, so only the content speaks).
- A rotary table: each plane labelled ``x`` turns along the columns only, each ``y`` plane along the rows only.
- A table: its rows at the new grid are the native table resampled to (rows, cols), not to (cols, rows)
  (the reference is ``F.interpolate`` here, bicubic as documented); a sin-cos code's column half varies along the
  columns only.

On timm and transformers models all of it is read off the model's own forward (hooks on its own modules, in the
audit's dtype) at the non-square grid where it takes other sizes (timm ``dynamic_img_size``, transformers'
interpolation, DINOv3), else at its own grid: the bright patches with its table zeroed and its rotation the
identity, the rotary table its forward hands block 0, and the tokens it hands block 0 against its declared table
resampled to rows x cols (and to cols x rows, transposed, which must be farther).

Imports: torch; :mod:`peanchor.interventions` (pe_resample to reach the grid).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from peanchor.audit.checks.pe_identity import measured_layout, plane_angles
from peanchor.audit.probes import (bright_patch_images, captured, layer0_tokens, max_diff, own_rope_angles, random_images,
                                   tolerance, watcher)
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject
from peanchor.interventions import Intervention

NAME = "axes_in_order"
TOLERANCE = 1e-4


def non_square(grid: tuple[int, int]) -> tuple[int, int]:
    """A grid with as many rows as ``grid`` and two more columns."""
    return grid[0], grid[1] + 2


def reference_rows(patches: torch.Tensor, old: tuple[int, int], new: tuple[int, int]) -> torch.Tensor:
    """Patch rows ``(1, H·W, D)`` resampled to ``new`` by bicubic ``F.interpolate`` with antialiasing (the
    documented mode), written here independently of the model's path: ``(1, H'·W', D)``."""
    d = patches.shape[-1]
    image = patches.float().reshape(1, *old, d).permute(0, 3, 1, 2)  # (1, D, H, W)
    out = F.interpolate(image, size=new, mode="bicubic", antialias=True, align_corners=False)
    return out.permute(0, 2, 3, 1).reshape(1, new[0] * new[1], d)


def _reach(subject: AuditSubject, grid: tuple[int, int]) -> list[str]:
    return [f"pe_resample:grid={grid[0]}x{grid[1]}"] if grid != subject.grid else []


def check(subject: AuditSubject) -> CheckResult:
    hooks = subject.hooks
    if watcher(subject) is not None:
        return _own(subject)
    if "input.grid" not in hooks.points:
        return CheckResult(NAME, "n/a", None, f"{hooks.model} runs at its own grid only (no input.grid hook point)")
    grid = non_square(subject.grid)
    reach = _reach(subject, grid)
    removal = ["pe_zero"] if "pe.table" in hooks.points else ["rope_planes"] if "rope.tables" in hooks.points else []
    slots = [1, grid[1] - 1, grid[1] + 2, grid[0] * grid[1] - 2]  # row 0, the end of row 0, row 1, the last row
    images = bright_patch_images(grid, subject.patch, slots)
    blank = layer0_tokens(subject.model, images[:1] * 0, Intervention.parse(reach + removal))  # (1, N, D)
    tokens = layer0_tokens(subject.model, images, Intervention.parse(reach + removal))  # (B, N, D)
    found = (tokens - blank).norm(dim=-1).argmax(dim=-1).tolist()  # the slot each bright patch changed most
    if found != slots:
        return CheckResult(NAME, "fail", None, f"bright patches at slots {slots} of a {grid[0]}x{grid[1]} grid "
                           f"changed slots {found} most: the tokens are not in row-major order")  # fmt: skip
    where = f"at grid {grid[0]}x{grid[1]}"
    if "rope.tables" in hooks.points:
        tables = captured(subject.model, random_images(1, subject.size(grid)), "rope.tables",
                          *Intervention.parse(reach).edits)  # fmt: skip
        angles, _ = plane_angles(tables, grid)
        _, axes, _ = measured_layout(angles)
        labels = [p.axis for p in tables.planes]
        wrong = sum(1 for a, b in zip(axes, labels) if b is not None and a != b)
        status = "pass" if wrong == 0 else "fail"
        return CheckResult(NAME, status, float(wrong), f"{wrong} of {len(labels)} rotary planes turn along another "
                           f"axis than their label {where}; patch order row-major")  # fmt: skip
    if "pe.table" in hooks.points:
        images = random_images(1, subject.size(grid))
        native = captured(subject.model, random_images(1, subject.size()), "pe.table").patches
        table = captured(subject.model, images, "pe.table", *Intervention.parse(reach).edits)
        if table.patches.shape[1] != grid[0] * grid[1]:
            return CheckResult(NAME, "fail", None, f"a table of {table.patches.shape[1]} rows {where}")
        err = float((table.patches - reference_rows(native, subject.grid, grid)).abs().max())
        swapped = reference_rows(native, subject.grid, grid[::-1]).reshape(1, grid[1], grid[0], -1)
        err_t = float((table.patches - swapped.transpose(1, 2).reshape(table.patches.shape)).abs().max())
        scale = float(native.abs().max().clamp_min(1e-12))
        err, err_t = err / scale, err_t / scale
        if subject.claim.kind == "sin-cos":
            d = native.shape[-1]
            cols_half = table.patches[0, :, : d // 2].reshape(*grid, -1)
            err = max(err, float((cols_half - cols_half[:1]).abs().max()) / scale)
        status = "pass" if err <= TOLERANCE and err_t > err else "fail"
        return CheckResult(NAME, status, err, f"the table {where} is {err:.2g} from the native one resampled to "
                           f"rows x cols ({err_t:.2g} from cols x rows, transposed); patch order row-major")  # fmt: skip
    return CheckResult(NAME, "pass", None, f"patch order row-major {where} (no table or rotation to read)")


def _own(subject: AuditSubject) -> CheckResult:
    """The check on the model's own forward, at the non-square grid it takes (else its own)."""
    obs = watcher(subject)
    native = tuple(obs.native_grid)
    grid = non_square(native) if non_square(native) in obs.grids() else native
    where, p = f"at grid {grid[0]}x{grid[1]} in the model's own forward", obs.prefix
    slots = [1, grid[1] - 1, grid[1] + 2, grid[0] * grid[1] - 2]  # row 0, the end of row 0, row 1, the last row
    images = bright_patch_images(grid, obs.patch, slots)
    blank = obs.entry(images[:1] * 0, remove=True).tokens[0][:, p:].float()  # (1, N, D)
    tokens = obs.entry(images, remove=True).tokens[0][:, p:].float()  # (B, N, D)
    found = (tokens - blank).norm(dim=-1).argmax(dim=-1).tolist()  # the slot each bright patch changed most
    if found != slots:
        return CheckResult(NAME, "fail", None, f"bright patches at slots {slots} {where} changed slots {found} "
                           "most: the tokens are not in row-major order")  # fmt: skip
    seen = obs.run(random_images(1, obs.size(grid)).to(obs.dtype), eager=False)
    if seen.error is not None:
        raise seen.error
    angles = own_rope_angles(obs, seen, grid)
    if angles is not None:
        _, axes, _ = measured_layout(angles[0])
        _, labels, _ = measured_layout(angles[1])  # the axis each plane turns along in the declared table
        wrong = sum(1 for a, b in zip(axes, labels) if b is not None and a != b)
        if wrong:
            return CheckResult(NAME, "fail", float(wrong), f"{wrong} of {len(labels)} rotary planes turn along "
                               f"another axis than declared {where} ({angles[2]})")  # fmt: skip
    if grid == native or not obs.tables():
        return CheckResult(NAME, "pass", 0.0, f"patch order row-major {where}"
                           + ("; every rotary plane turns along its declared axis" if angles is not None else ""))
    err = max_diff(seen.tokens[0], obs.reference_embedding(seen.tables["patches"], grid))
    flipped = _transposed_reference(obs, seen.tables["patches"], grid)
    err_t = max_diff(seen.tokens[0], flipped)
    status = "pass" if err <= tolerance(TOLERANCE, obs.dtype) and err_t > err else "fail"
    return CheckResult(NAME, status, err, f"the tokens entering block 0 {where} are {err:.2g} from the declared "
                       f"table resampled to rows x cols ({err_t:.2g} from cols x rows, transposed); patch order "
                       "row-major")  # fmt: skip


def _transposed_reference(obs: object, patches: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
    """The declared embedding with the table resampled to cols x rows and read transposed (H and W swapped)."""
    b, n, d = patches.shape
    turned = patches.reshape(b, *grid, d).transpose(1, 2).reshape(b, n, d)  # the patches on the swapped grid
    x = obs.reference_embedding(turned, grid[::-1])  # type: ignore[attr-defined]  # (B, P + N, D)
    p = x.shape[1] - n
    back = x[:, p:].reshape(b, grid[1], grid[0], d).transpose(1, 2).reshape(b, n, d)
    return torch.cat([x[:, :p], back], dim=1)


CHECKS.register(Check(NAME, "on a non-square grid, rows follow the height and columns the width", check))
