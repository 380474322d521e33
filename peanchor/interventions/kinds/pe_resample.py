"""``pe_resample``: the position code moved to another patch grid, for images of the matching size.

The absolute table's patch rows are resampled as timm's ``resample_abs_pos_embed`` does (the rows as a
``(D, H, W)`` image, ``F.interpolate`` in float32 with ``mode`` and ``antialias``; the prefix rows unchanged; the
same grid returns the table itself). A RoPE model builds its rotary tables at the new grid's positions, and so does a
PE with an attention bias or a general rotation (``pe.bias``, ``pe.rotation``: ALiBi, LieRE, ComRoPE, STRING):
``extrapolate`` keeps the integer grid coordinates (the new grid runs past the trained one), ``interpolate`` maps
the new grid's patch centres onto the trained span, ``(j + 0.5) · W / W' - 0.5``. A model without a positional code
(``none``) only takes images of the new grid: the baseline of a resolution sweep.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import Edit, HookPoints, PETable
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import choice, flag, grid_size, param


def resample_rows(rows: Tensor, old: tuple[int, int], new: tuple[int, int], mode: str, antialias: bool) -> Tensor:
    """Patch rows ``(1, H·W, D)`` of grid ``old`` resampled to grid ``new``: ``(1, H'·W', D)``.

    >>> t = torch.arange(4.).view(1, 4, 1)  # a 2x2 grid, one channel
    >>> resample_rows(t, (2, 2), (4, 4), "nearest", False).view(4, 4).tolist()[0]
    [0.0, 0.0, 1.0, 1.0]
    """
    if tuple(old) == tuple(new):
        return rows
    d = rows.shape[-1]
    image = rows.float().reshape(1, old[0], old[1], d).permute(0, 3, 1, 2)  # (1, D, H, W)
    smooth = antialias and mode in ("bilinear", "bicubic")  # torch antialiases only these modes
    image = F.interpolate(image, size=new, mode=mode, antialias=smooth)  # (1, D, H', W')
    return image.permute(0, 2, 3, 1).reshape(1, -1, d).to(rows.dtype)  # (1, H'·W', D)


def grid_positions(grid: tuple[int, int], trained: tuple[int, int], how: str) -> tuple[Tensor, Tensor]:
    """Row and column coordinates ``(N,)`` of ``grid``'s slots (row-major), in units of the trained grid's patches.

    >>> grid_positions((2, 2), (4, 4), "interpolate")[1].tolist()
    [0.5, 2.5, 0.5, 2.5]
    """
    idx = torch.arange(grid[0] * grid[1])
    y, x = (idx // grid[1]).double(), (idx % grid[1]).double()
    if how == "interpolate":
        y = (y + 0.5) * (trained[0] / grid[0]) - 0.5
        x = (x + 0.5) * (trained[1] / grid[1]) - 0.5
    return y, x


@INTERVENTIONS.register
@dataclass(frozen=True)
class PEResample(Edit):
    """The table (and the RoPE positions) moved to ``grid``; the pass then needs images of that patch grid."""

    kind = "pe_resample"
    summary = "the position code moved to another patch grid (images of the matching size)"

    grid: tuple[int, int] | None = param(grid_size, "ROWSxCOLS of patches, e.g. 14x14 (default: the model's)", None)
    mode: str = param(choice("bicubic", "bilinear", "nearest"), "bicubic, bilinear or nearest", "bicubic")
    antialias: bool = param(flag, "true or false (as timm: true; bilinear and bicubic only)", True)
    rope_positions: str = param(choice("extrapolate", "interpolate"), "extrapolate or interpolate", "extrapolate")

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        coded = tuple(p for p in ("pe.table", "rope.tables", "pe.bias", "pe.rotation") if p in hooks.points)
        if not coded and "input.grid" not in hooks.points:
            raise ConfigError(f"pe_resample needs pe.table, rope.tables, pe.bias or pe.rotation, and {hooks.model} has "
                              "none of them")
        return ("input.grid",) + coded  # a model without a PE only takes the other grid (the baseline of a sweep)

    def pass_grid(self, hooks: HookPoints) -> tuple[int, int]:
        return self.grid if self.grid is not None else hooks.grid

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        new = self.pass_grid(hooks)
        return PETable(table.prefix, resample_rows(table.patches, table.grid, new, self.mode, self.antialias), new)

    def rope_coordinates(self, hooks: HookPoints) -> tuple[Tensor, Tensor]:
        return grid_positions(self.pass_grid(hooks), hooks.grid, self.rope_positions)
