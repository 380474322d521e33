"""What one pass changes at inference: :class:`Intervention` (token order, PE scale, edits) and its spec text; what
edits need before their pass (:func:`fitted_edits`, :func:`donor_activations`), through the :class:`Edit` protocol
alone: no kind is named here.

Imports: torch; :mod:`peanchor.interventions` (edit, record, registry, spec).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from torch import Tensor

from peanchor.interventions.edit import Edit, EditPass, HookPoints
from peanchor.interventions.record import Record
from peanchor.interventions.registry import edit_from_spec
from peanchor.interventions.spec import split_edits

__all__ = ["NO_INTERVENTION", "Intervention", "donor_activations", "fitted_edits"]


@dataclass(frozen=True, eq=False)
class Intervention:
    """What an analysis changes at inference, and nothing else: the token order (RPI), the PE scale (α) and the
    edits at the model's hook points (docs/interventions.md), applied in order.

    ``token_perm``: ``(N,)`` shared by the batch or ``(B, N)`` per sample; slot ``i`` receives the patch content
    from position ``token_perm[i]`` (None: tokens in order). ``pe_scale``: α, 1 = the PE as trained, 0 = none.

    Examples:
        >>> Intervention().pe_scale, Intervention(pe_scale=0.5).token_perm is None, Intervention().edits
        (1.0, True, ())
        >>> " + ".join(e.spec for e in Intervention.parse("pe_zero+pe_shuffle:seed=3").edits)
        'pe_zero:prefix=zero + pe_shuffle:seed=3'
    """

    token_perm: Tensor | None = None
    pe_scale: float = 1.0
    edits: tuple[Edit, ...] = ()

    @classmethod
    def parse(
        cls, spec: str | Iterable[str], *, token_perm: Tensor | None = None, pe_scale: float = 1.0
    ) -> Intervention:
        """The intervention a spec describes: ``kind:key=value,...``, several joined with ``+`` or given as a list
        (the CLI's repeated ``--intervention``). An unknown kind or key, or a bad value, is one ConfigError line."""
        texts = [spec] if isinstance(spec, str) else list(spec)
        edits = tuple(edit_from_spec(part) for text in texts for part in split_edits(text))
        return cls(token_perm, pe_scale, edits)

    def with_edits(self, *edits: Edit) -> Intervention:
        """This intervention with ``edits`` appended."""
        return replace(self, edits=self.edits + edits)

    def bind(
        self,
        hooks: HookPoints,
        run: Callable[[Intervention], object],
        n: int,
        device: Any,
        donors: Mapping[Any, Tensor] | None = None,
    ) -> EditPass | None:
        """This pass's edits checked against a model's ``hooks`` and bound to their donor activations; None without
        edits (the model then runs its plain pass). ``run(intervention)`` is one pass of the same images on the same
        model (for the donors of ``patch``); ``n`` is the number of patch slots. ``donors``: activations of donor
        passes already run (``Start.donors``), which are then not run again."""
        if not self.edits:
            return None
        for edit in self.edits:
            edit.check(hooks)

        def donor_pass(perm: Tensor | None, edits: tuple[Edit, ...]) -> None:
            run(Intervention(perm, self.pe_scale, edits))

        found = donor_activations(self.edits, self.token_perm, n, device, donor_pass, donors)
        return EditPass(self.edits, hooks, found)

    @property
    def spec(self) -> str:
        """The edits as spec text (``+``-joined; empty without edits)."""
        return "+".join(e.spec for e in self.edits)


#: Tokens in order, the PE as trained.
NO_INTERVENTION = Intervention()


def fitted_edits(edits: Iterable[Edit], model: Any, batches: Callable[[], Iterable[Tensor]]) -> tuple[Edit, ...]:
    """``edits`` made ready for an analysis of ``model`` and checked against its hook points: an edit that
    :meth:`~Edit.needs_fit` (a mean ablation, ``head_ablate:value=mean``) is fitted over ``batches()`` (normalised
    images) under the plain pass."""
    ready = tuple(e.fit(model, batches()) if e.needs_fit() else e for e in edits)
    if ready:
        hooks = model.hook_points
        for edit in ready:
            edit.check(hooks)
    return ready


def donor_activations(
    edits: tuple[Edit, ...],
    receiving: Tensor | None,
    n: int,
    device: Any,
    run: Callable[[Any, tuple[Edit, ...]], None],
    have: Mapping[Any, Tensor] | None = None,
) -> dict[Any, Tensor]:
    """Every activation the edits among ``edits`` read from donor passes (:meth:`Edit.donor_key`): one donor pass
    per key, ``run(perm, edits)`` with the edits a donor pass keeps (not :attr:`Edit.donor_pass_excludes`) and a
    :class:`Record` of the sites read; keyed ``(*donor_key, site, layer)``. A donor whose every activation ``have``
    holds (keyed alike, from a pass already run) is not run again."""
    readers = [e for e in edits if e.donor_key() is not None]
    rest = tuple(e for e in edits if not e.donor_pass_excludes)
    have = have or {}
    donors: dict[Any, Tensor] = {}
    for key in dict.fromkeys(e.donor_key() for e in readers):
        group = [e for e in readers if e.donor_key() == key]
        sites = frozenset(site for e in group for site in e.donor_sites())
        wanted = [(*key, site, layer) for site, layer in sorted(sites)]
        if all(k in have for k in wanted):
            donors.update({k: have[k] for k in wanted})
            continue
        store: dict[tuple[str, int], Tensor] = {}
        run(group[0].donor_perm(receiving, n, device), rest + (Record(sites, store),))
        donors.update({(*key, site, layer): t for (site, layer), t in store.items()})
    return donors
