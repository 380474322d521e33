"""``pe_zero``: every positional code a model has, removed: the absolute table (or the sin-cos code) set to zero,
prefix rows included unless ``prefix=keep``; the rotary tables made the identity (cosine 1, sine 0); a PE's
attention bias (ALiBi) and its general rotation (LieRE, ComRoPE, STRING) dropped.

It acts at whichever of ``pe.table``, ``rope.tables``, ``pe.bias`` and ``pe.rotation`` the model has, so that one
spec removes the position of every family (RoPE + APE loses both its table and its rotation); a model with none of
them is told so in one line.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import Edit, HookPoints, PETable, RopeTables
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import choice, param

#: The hook points that carry a positional code, in the order the message names them.
CODE_POINTS = ("pe.table", "rope.tables", "pe.bias", "pe.rotation")


@INTERVENTIONS.register
@dataclass(frozen=True)
class PEZero(Edit):
    """Every row of ``pe.table`` zeroed (with ``prefix=keep`` the CLS and register rows stay as trained), the rotary
    tables the identity, the PE's attention bias and general rotation dropped: whichever of these the model has."""

    kind = "pe_zero"
    summary = "every positional code removed: table zeroed (prefix rows too unless prefix=keep), rotations, bias"
    points = ("pe.table",)

    prefix: str = param(choice("zero", "keep"), "zero (CLS and register rows zeroed too) or keep", "zero")

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        coded = tuple(p for p in CODE_POINTS if p in hooks.points)
        if not coded:
            raise ConfigError(f"pe_zero acts at {', '.join(CODE_POINTS)}, and {hooks.model} has none of them")
        return coded

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        prefix = table.prefix
        if prefix is not None and self.prefix == "zero":
            prefix = torch.zeros_like(prefix)
        return PETable(prefix, torch.zeros_like(table.patches), table.grid)

    def on_rope(self, tables: RopeTables, hooks: HookPoints) -> RopeTables:
        return RopeTables(torch.ones_like(tables.cos), torch.zeros_like(tables.sin), tables.planes)

    def on_bias(self, bias: Tensor | None, hooks: HookPoints) -> Tensor | None:
        return None  # no bias: exactly the position-free attention

    def on_rotation(self, rotation: Any, hooks: HookPoints) -> Any:
        return None  # no rotation
