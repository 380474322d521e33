"""``rope_planes``: chosen rotation planes of the rotary tables made the identity (sine 0, cosine 1).

A plane is a pair of channels rotated together by one frequency along one axis (``x``: columns, ``y``: rows; a
mixed RoPE's planes have no single axis and are chosen with ``axis=both``). ``freqs`` indexes the planes of each
chosen axis, 0 being the fastest-turning one (on a mixed RoPE: the table's own order). The planes are chosen in the
``layers`` and ``heads`` given, everywhere else the table is as the model built it.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import HookPoints, LayersAndHeads, RopeTables, check_indices
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import INDEX_RULE, IndexSet, choice, index_set, param


@INTERVENTIONS.register
@dataclass(frozen=True)
class RopePlanes(LayersAndHeads):
    """Sine 0 and cosine 1 on the chosen planes' channels, in the chosen layers and heads, at every slot."""

    kind = "rope_planes"
    summary = "chosen RoPE rotation planes made the identity (sin 0, cos 1)"
    points = ("rope.tables",)

    axis: str = param(choice("x", "y", "both"), "x (columns), y (rows) or both", "both")
    freqs: IndexSet = param(index_set, f"the frequencies per axis, 0 = fastest ({INDEX_RULE})", None)

    def check(self, hooks: HookPoints) -> None:
        super().check(hooks)
        if self.axis != "both" and any(p.axis is None for p in hooks.planes):
            raise ConfigError(f"rope_planes:axis={self.axis}: the planes of {hooks.model} mix both axes; use axis=both")
        axes = {p.axis for p in hooks.planes if self.axis in ("both", p.axis)}
        per_axis = min(sum(1 for p in hooks.planes if p.axis == a) for a in axes) if axes else 0
        check_indices(self.kind, "freqs", self.freqs, per_axis, "frequencies per axis")

    def on_rope(self, tables: RopeTables, hooks: HookPoints) -> RopeTables:
        channels = [c for p in tables.planes if self._chosen(p.axis, p.freq) for c in p.channels]
        device = tables.cos.device
        layers = _selection(self.layers, hooks.depth, tables.cos.shape[0], device)  # (L|1,)
        heads = _selection(self.heads, hooks.num_heads, tables.cos.shape[1], device)  # (H|1,)
        planes = torch.zeros(tables.cos.shape[-1], dtype=torch.bool, device=device)
        planes[channels] = True  # (C,)
        mask = layers[:, None, None, None] & heads[None, :, None, None] & planes  # (L|1, H|1, 1, C)
        cos = torch.where(mask, torch.ones_like(tables.cos), tables.cos)  # (L|1, H|1, N, C)
        sin = torch.where(mask, torch.zeros_like(tables.sin), tables.sin)
        return RopeTables(cos, sin, tables.planes)

    def _chosen(self, axis: str | None, freq: int) -> bool:
        on_axis = self.axis == "both" or axis == self.axis
        return on_axis and (self.freqs is None or freq in self.freqs)


def _selection(chosen: IndexSet, size: int, have: int, device: torch.device) -> torch.Tensor:
    """``(size,)`` flags of the chosen indices; ``(have,)`` all True when every index is chosen."""
    if chosen is None:
        return torch.ones(have, dtype=torch.bool, device=device)
    flags = torch.zeros(size, dtype=torch.bool, device=device)
    flags[list(chosen)] = True
    return flags
