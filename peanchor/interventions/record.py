"""``Record``: an edit that changes nothing and keeps the tensors at some block sites (donor passes, fitted means).

It is not a registered kind: no spec reads to it; the edits that need a first pass build it.

Imports: torch; :mod:`peanchor.interventions` (edit).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import Tensor

from peanchor.interventions.edit import Edit, EditPass, HookPoints


@dataclass(frozen=True)
class Record(Edit):
    """Keeps ``store[(site, layer)] = x`` for each of ``sites`` during the pass; returns ``x`` unchanged."""

    kind = "record"
    donor_pass_excludes = True  # another pass's record: not part of a donor pass
    summary = "keeps the tensors at some block sites"

    sites: frozenset[tuple[str, int]] = frozenset()
    store: dict[tuple[str, int], Tensor] = field(default_factory=dict, compare=False, repr=False)

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        return tuple(sorted({f"blocks.{{k}}.{site}" for site, _ in self.sites}))

    def block_sites(self, hooks: HookPoints) -> frozenset[tuple[str, int]]:
        return self.sites

    def first_layer(self, hooks: HookPoints) -> int:
        return hooks.depth  # it changes nothing

    def on_block(self, site: str, layer: int, x: Tensor, run: EditPass) -> Tensor:
        self.store[(site, layer)] = x
        return x
