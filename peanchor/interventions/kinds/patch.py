"""``patch``: a block's activation taken from a donor pass of the same images (activation patching).

``site`` is the block's ``residual`` stream leaving it, its ``attn`` or its ``mlp`` branch; ``layer`` the block.
The donor is the same intervention (α and every edit but the patches) run with another token order: ``clean``
(tokens in order) or ``rpi`` (the receiving pass's permutation, or, when the receiving pass has none, a shared
permutation drawn from ``seed``). So clean activations go into an RPI run (``donor=clean`` on an RPI pass) and the
reverse (``donor=rpi`` on a clean pass). The donor passes are run by
:func:`~peanchor.interventions.intervention.donor_activations` before the pass, once per donor.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec, permutation).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import Edit, EditPass, HookPoints
from peanchor.interventions.permutation import random_permutation
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import choice, integer, param


@INTERVENTIONS.register
@dataclass(frozen=True)
class Patch(Edit):
    """Block ``layer``'s ``site`` replaced by the donor pass's, tensor for tensor."""

    kind = "patch"
    summary = "a block's residual, attention or MLP output taken from the clean or the RPI pass of the same images"

    site: str = param(choice("residual", "attn", "mlp"), "residual, attn or mlp", "residual")
    layer: int = param(integer, "the block (0 .. depth-1)", 0)
    donor: str = param(choice("clean", "rpi"), "clean or rpi", "clean")
    seed: int = param(integer, "the donor's permutation seed when the receiving pass has none (donor=rpi)", 0)

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        return (f"blocks.{{k}}.{self.site}",)

    def check(self, hooks: HookPoints) -> None:
        super().check(hooks)
        if not 0 <= self.layer < hooks.depth:
            raise ConfigError(f"patch:layer={self.layer}: the model has {hooks.depth} blocks (0-{hooks.depth - 1})")

    def block_sites(self, hooks: HookPoints) -> frozenset[tuple[str, int]]:
        return frozenset({(self.site, self.layer)})

    def first_layer(self, hooks: HookPoints) -> int:
        return self.layer

    def on_block(self, site: str, layer: int, x: Tensor, run: EditPass) -> Tensor:
        donor = run.donors[(*self.donor_key(), site, layer)]
        if donor.shape != x.shape:
            raise ConfigError(f"patch:site={site},layer={layer}: the donor's {tuple(donor.shape)} does not fit "
                              f"{tuple(x.shape)}")  # fmt: skip
        return donor

    donor_pass_excludes = True  # a donor pass runs without the patches

    def donor_key(self) -> tuple[str, int]:
        return (self.donor, self.seed if self.donor == "rpi" else 0)

    def donor_sites(self) -> frozenset[tuple[str, int]]:
        return frozenset({(self.site, self.layer)})

    def donor_perm(self, receiving: Tensor | None, n: int, device: torch.device) -> Tensor | None:
        if self.donor == "clean":
            return None
        if receiving is not None:
            return receiving
        return random_permutation(n, generator=torch.Generator().manual_seed(self.seed), device=device)
