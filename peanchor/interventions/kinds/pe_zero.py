"""``pe_zero``: the absolute table (or the sin-cos code) set to zero, prefix rows included unless ``prefix=keep``.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from peanchor.interventions.edit import Edit, HookPoints, PETable
from peanchor.interventions.registry import register_intervention
from peanchor.interventions.spec import choice, param


@register_intervention
@dataclass(frozen=True)
class PEZero(Edit):
    """Every row of ``pe.table`` zeroed; with ``prefix=keep`` the CLS and register rows stay as trained."""

    kind = "pe_zero"
    summary = "the absolute table set to zero (prefix rows too unless prefix=keep)"
    points = ("pe.table",)

    prefix: str = param(choice("zero", "keep"), "zero (CLS and register rows zeroed too) or keep", "zero")

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        prefix = table.prefix
        if prefix is not None and self.prefix == "zero":
            prefix = torch.zeros_like(prefix)
        return PETable(prefix, torch.zeros_like(table.patches), table.grid)
