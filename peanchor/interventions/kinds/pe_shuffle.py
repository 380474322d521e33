"""``pe_shuffle``: the patch rows of the absolute table permuted by a seeded permutation; the prefix rows stay.

Position is still there (every slot keeps a distinct row), but its geometry is gone: neighbouring slots get rows
that were anywhere on the grid.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from peanchor.interventions.edit import Edit, HookPoints, PETable
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import integer, param


def table_permutation(n: int, seed: int) -> torch.Tensor:
    """The permutation ``pe_shuffle:seed=SEED`` applies to ``n`` patch rows: slot ``i`` gets row ``perm[i]``."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))


@INTERVENTIONS.register
@dataclass(frozen=True)
class PEShuffle(Edit):
    """Slot ``i`` of ``pe.table`` gets patch row ``perm[i]``, ``perm = torch.randperm(N)`` seeded by ``seed``."""

    kind = "pe_shuffle"
    summary = "the table's patch rows permuted (seeded); the prefix rows stay"
    points = ("pe.table",)

    seed: int = param(integer, "the permutation's seed (an integer)", 0)

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        perm = table_permutation(table.patches.shape[1], self.seed).to(table.patches.device)
        return PETable(table.prefix, table.patches[:, perm], table.grid)  # (1, N, D)
