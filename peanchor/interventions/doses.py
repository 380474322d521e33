"""``forward_doses``: one batch under a base intervention and under each dose of a sweep, the shared work done once.

Each dose's output equals (bit for bit) ``model.forward_intermediates(images, dose, layers=layers, head=head)``; what
changes is what runs (docs/interventions.md, "The cost of a sweep"):

* **the base pass** runs once and keeps, with a ``Record``, the residual stream entering every block a dose starts
  at and every activation a ``patch`` dose takes from it;
* **a dose that parts from the base at block k** (the same token order and α, the base's edits followed by edits
  whose :meth:`~peanchor.interventions.edit.Edit.first_layer` is k or later: ``head_ablate``, ``patch``,
  ``rope_planes:layers=...``) starts at block k from the base's residual (:class:`~peanchor.interventions.Start`);
  the blocks before k are not run again, and their tokens are the base's. A dose that changes no block, or (with
  ``head=False``) none whose tokens are returned, is the base's output itself. Any other dose (RPI against a clean
  base, another α, ``pe_zero``, ...) runs from the input;
* **a patch donor** that is the base pass (``donor=clean`` on a clean base, ``donor=rpi`` on an RPI base with the
  same permutation, the dose's other edits being the base's) is read from the base pass; any other donor pass runs
  once for every dose that reads it, keeping the union of their sites.

A sweep of k doses so costs at most k + 1 passes (plus one per distinct other donor), and a sweep of an edit over
the blocks of a model about half of that.

Imports: torch; :mod:`peanchor.interventions` (edit, intervention, record, start).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from peanchor.interventions.edit import Edit, EditPass, HookPoints
from peanchor.interventions.intervention import Intervention
from peanchor.interventions.record import Record
from peanchor.interventions.start import Start, first_changed_block, same_edits, same_perm

__all__ = ["forward_doses"]

Site = tuple[str, int]  # (site, layer), as Record keeps it
DonorKey = tuple[str, int, str, int]  # (donor, seed, site, layer), as donor_activations keys it


@dataclass
class _DonorPass:
    """One donor pass shared by the doses that read it: its token order, α, edits and the sites they read."""

    perm: Tensor | None
    pe_scale: float
    edits: tuple[Edit, ...]
    sites: set[Site] = field(default_factory=set)
    store: dict[Site, Tensor] = field(default_factory=dict)

    def serves(self, perm: Tensor | None, pe_scale: float, edits: tuple[Edit, ...]) -> bool:
        return pe_scale == self.pe_scale and same_edits(edits, self.edits) and same_perm(perm, self.perm)


@dataclass
class _Dose:
    """How one dose is computed: from block ``start`` (None: it is the base's output) and where its donors are."""

    intervention: Intervention
    start: int | None
    from_base: dict[DonorKey, Site] = field(default_factory=dict)
    from_pass: dict[DonorKey, tuple[_DonorPass, Site]] = field(default_factory=dict)


def forward_doses(
    model: Any,
    images: Tensor,
    base: Intervention,
    doses: Sequence[Intervention],
    *,
    layers: int | None = None,
    head: bool = True,
) -> tuple[Any, list[Any]]:
    """The pass under ``base`` and one pass per dose; each output equals (bit for bit)
    ``model.forward_intermediates(images, iv, layers=layers, head=head)`` for iv in (base, *doses), an
    :class:`~peanchor.models.interface.Intermediates` each. The work they share runs once (the module docstring).

    Returns:
        ``(base_output, [dose_output, ...])``: one output per dose, in the order of ``doses``.
    """
    hooks: HookPoints = model.hook_points
    count = hooks.depth if layers is None else layers
    for iv in (base, *doses):  # a bad edit fails in one line before any pass, as the first separate call would
        for edit in iv.edits:
            edit.check(hooks)
    # With head=False the base pass runs blocks 0 .. count-2 whole (and block count-1's probe only).
    reach = hooks.depth if head else count - 1
    base_plain = tuple(e for e in base.edits if not isinstance(e, Record))
    base_donates = not any(e.donor_key() is not None for e in base.edits)
    donor_passes: list[_DonorPass] = []
    plans = []
    for dose in doses:
        first = first_changed_block(base, dose, hooks)
        if first >= hooks.depth or (not head and first >= count - 1):
            plans.append(_Dose(dose, None))  # nothing it returns differs from the base's
            continue
        plan = _Dose(dose, first)
        n = _slots(dose, hooks)
        rest = tuple(e for e in dose.edits if not e.donor_pass_excludes)
        for p, site in ((e, site) for e in dose.edits if e.donor_key() is not None for site in sorted(e.donor_sites())):
            key = (*p.donor_key(), *site)
            perm = p.donor_perm(dose.token_perm, n, images.device)
            is_base = same_perm(perm, base.token_perm) and same_edits(rest, base_plain)
            is_base = is_base and dose.pe_scale == base.pe_scale
            if base_donates and is_base and site[1] < reach:
                plan.from_base[key] = site
                continue
            shared = next((d for d in donor_passes if d.serves(perm, dose.pe_scale, rest)), None)
            if shared is None:
                shared = _DonorPass(perm, dose.pe_scale, rest)
                donor_passes.append(shared)
            shared.sites.add(site)
            plan.from_pass[key] = (shared, site)
        plans.append(plan)

    kept: dict[Site, Tensor] = {}
    wanted = {("residual", p.start - 1) for p in plans if p.start} | {s for p in plans for s in p.from_base.values()}
    recorded = base.with_edits(Record(frozenset(wanted), kept)) if wanted else base
    base_out = model.forward_intermediates(images, recorded, layers=layers, head=head)
    for d in donor_passes:  # as a separate call runs its donor pass: the same edits, then a Record, no tokens
        donor = Intervention(d.perm, d.pe_scale, d.edits + (Record(frozenset(d.sites), d.store),))
        model.forward_intermediates(images, donor, layers=0)
    outs = []
    for plan in plans:
        if plan.start is None:
            outs.append(base_out)
            continue
        donors = {k: kept[s] for k, s in plan.from_base.items()}
        donors.update({k: d.store[s] for k, (d, s) in plan.from_pass.items()})
        if plan.start:
            start = Start(plan.start, kept[("residual", plan.start - 1)], base_out.tokens, base, donors)
        else:
            start = Start(donors=donors)
        outs.append(model.forward_intermediates(images, plan.intervention, layers=layers, head=head, start=start))
    return base_out, outs


def _slots(iv: Intervention, hooks: HookPoints) -> int:
    """The patch slots of a pass under ``iv`` (another grid under ``pe_resample``), as a model's ``_bind`` counts."""
    grid = EditPass(iv.edits, hooks).grid if iv.edits else hooks.grid
    return grid[0] * grid[1]
