"""``Start``: where a pass begins, and what it takes from a pass of the same images that already ran.

Every backend's ``forward_intermediates(..., start=Start(...))`` honours it (docs/interventions.md, "The cost of a
sweep"). A pass that starts at block ``layer`` does not run the blocks before it: it feeds ``residual``, the
residual stream entering that block in an earlier pass, to block ``layer``, builds its own tables (RoPE, attention
bias) and prefix count as any pass does, and returns the earlier pass's ``tokens`` for the blocks before ``layer``.
That is the pass it would have run only when nothing before ``layer`` differs: the same images (the caller vouches
for those), the same token order and α as ``source`` (the earlier pass's intervention), and ``source``'s edits
followed by edits that change no block before ``layer`` (:meth:`~peanchor.interventions.edit.Edit.first_layer`);
:func:`first_changed_block` says where two interventions part, and a started pass checks it.

The stream entering block ``k >= 1`` is what leaves block ``k - 1``, the ``blocks.{k-1}.residual`` hook point, so a
:class:`~peanchor.interventions.record.Record` of that site keeps it during the earlier pass (:meth:`Start.record`).

``donors``, at any layer, are the activations of ``patch`` donor passes that already ran (keyed as
:func:`~peanchor.interventions.intervention.donor_activations` keys them): the pass does not run those donors again.

Imports: torch; :mod:`peanchor.interventions` (edit, intervention, record).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

import torch
from torch import Tensor

from peanchor.interventions.edit import Edit, HookPoints
from peanchor.interventions.intervention import Intervention
from peanchor.interventions.record import Record

__all__ = ["Start", "first_changed_block", "same_edits", "same_perm"]


def same_perm(a: Tensor | None, b: Tensor | None) -> bool:
    """Whether two token orders are the same (None: tokens in order)."""
    if a is None or b is None:
        return a is None and b is None
    return a is b or (a.shape == b.shape and a.device == b.device and bool(torch.equal(a, b)))


def _same_edit(a: Edit, b: Edit) -> bool:
    """Equal parameters, and the very same fitted state (a mean ablation's means are not compared by ``==``)."""
    if a is b:
        return True
    if type(a) is not type(b) or a != b:
        return False
    return all(getattr(a, f.name) is getattr(b, f.name) for f in fields(a) if not f.compare)  # type: ignore[arg-type]


def same_edits(a: Sequence[Edit], b: Sequence[Edit]) -> bool:
    """Whether two lists of edits are the same edits in the same order."""
    return len(a) == len(b) and all(_same_edit(x, y) for x, y in zip(a, b))


def first_changed_block(source: Intervention, iv: Intervention, hooks: HookPoints) -> int:
    """The first block whose computation under ``iv`` may differ from under ``source`` (same images): 0 unless both
    have the same token order and α and ``iv``'s edits are ``source``'s followed by more; then the first block those
    change (``hooks.depth``: none, ``iv`` is ``source``'s pass)."""
    n = len(source.edits)
    if iv.pe_scale != source.pe_scale or not same_edits(iv.edits[:n], source.edits):
        return 0
    if not same_perm(iv.token_perm, source.token_perm):
        return 0
    return min((e.first_layer(hooks) for e in iv.edits[n:]), default=hooks.depth)


@dataclass(frozen=True)
class Start:
    """A pass begun at block ``layer`` from ``residual`` ``(B, T, D)`` (prefix tokens first), the stream entering it
    in an earlier pass under ``source``, with ``tokens`` ``(B, L', N, D)`` (``L' >= layer``, or None when the pass
    returns no tokens) that pass's probes, and ``donors`` the ``patch`` donor activations already computed.
    ``Start()`` is an ordinary pass; ``Start(donors=...)`` one that reuses donors only."""

    layer: int = 0
    residual: Tensor | None = None
    tokens: Tensor | None = None
    source: Intervention | None = None
    donors: Mapping[Any, Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.layer < 0 or (self.layer > 0 and (self.residual is None or self.source is None)):
            raise ValueError(f"a pass started at block {self.layer} needs the residual entering it and its source")

    def check(self, intervention: Intervention, hooks: HookPoints) -> None:
        """Refuse a pass under ``intervention`` that would differ from ``source``'s before block ``layer``."""
        if self.layer and first_changed_block(self.source, intervention, hooks) < self.layer:  # type: ignore[arg-type]
            raise ValueError(f"a pass started at block {self.layer} must have its source's token order, α and edits, "
                             f"and add only edits of block {self.layer} on")  # fmt: skip

    @staticmethod
    def record(layer: int, store: dict[tuple[str, int], Tensor]) -> Record:
        """The edit that keeps, in ``store[("residual", layer - 1)]``, the stream entering block ``layer >= 1``."""
        return Record(frozenset({("residual", layer - 1)}), store)

    def probes_before(self, count: int) -> list[Tensor]:
        """The earlier pass's probes of the blocks before ``min(layer, count)``, one ``(B, N, D)`` each."""
        first = min(self.layer, count)
        if first and (self.tokens is None or self.tokens.shape[1] < first):
            raise ValueError(f"a pass started at block {self.layer} needs the tokens of the {first} blocks before")
        return [self.tokens[:, i] for i in range(first)] if first else []  # type: ignore[index]
