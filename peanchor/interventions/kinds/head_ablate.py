"""``head_ablate``: the output of chosen heads in chosen blocks set to zero or to its mean over an evaluation set.

It acts at ``blocks.{k}.attn.heads``, each head's attention output before the projection, so an ablated head
contributes nothing (``value=zero``) or a constant (``value=mean``) to the projection; the projection's bias stays.
Ablating every head of a block therefore leaves that block's attention branch equal to the projection's bias.

The mean needs a first pass: :meth:`HeadAblate.fit_means` runs the model over batches of images (under the
intervention given, the plain pass by default) and keeps, per block, the mean head output at every token slot
``(T, H, hd)``, averaged over the images. A mean ablation without fitted means is refused.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec, record).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch
from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import EditPass, HookPoints, LayersAndHeads
from peanchor.interventions.record import Record
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import choice, param


@INTERVENTIONS.register
@dataclass(frozen=True)
class HeadAblate(LayersAndHeads):
    """Heads ``heads`` of blocks ``layers`` replaced by zero or by their mean (see the module docstring)."""

    kind = "head_ablate"
    summary = "chosen heads' outputs set to zero or to their mean over the evaluation set"
    points = ("blocks.{k}.attn.heads",)

    value: str = param(choice("zero", "mean"), "zero or mean (over the evaluation set; needs fit_means)", "zero")
    #: block → mean head output (T, H, hd), from :meth:`fit_means`
    means: Mapping[int, Tensor] | None = field(default=None, compare=False, repr=False)

    def check(self, hooks: HookPoints) -> None:
        super().check(hooks)
        if self.value == "mean" and self.means is None:
            raise ConfigError("head_ablate:value=mean needs the heads' means: fit them first (HeadAblate.fit_means)")

    def chosen_layers(self, depth: int) -> tuple[int, ...]:
        return tuple(range(depth)) if self.layers is None else self.layers

    def block_sites(self, hooks: HookPoints) -> frozenset[tuple[str, int]]:
        return frozenset(("attn.heads", k) for k in self.chosen_layers(hooks.depth))

    def on_block(self, site: str, layer: int, x: Tensor, run: EditPass) -> Tensor:
        heads = slice(None) if self.heads is None else list(self.heads)
        x = x.clone()  # (B, T, H, hd)
        if self.value == "zero":
            x[:, :, heads] = 0
        else:
            assert self.means is not None  # check() refuses a mean ablation without means
            mean = self.means[layer].to(device=x.device, dtype=x.dtype)  # (T, H, hd)
            x[:, :, heads] = mean[:, heads].expand_as(x[:, :, heads])
        return x

    def needs_fit(self) -> bool:
        return self.value == "mean" and self.means is None

    def fit(self, model: Any, batches: Iterable[Tensor]) -> HeadAblate:
        return self.fit_means(model, batches)

    def fit_means(self, model: Any, batches: Iterable[Tensor], intervention: Any = None) -> HeadAblate:
        """This edit with the mean head output of its blocks over ``batches`` of normalised images, each pass run as
        ``model.forward_intermediates(images, intervention)`` (default: the plain pass)."""
        from peanchor.interventions.intervention import NO_INTERVENTION

        base = intervention if intervention is not None else NO_INTERVENTION
        sums: dict[int, Tensor] = {}
        count = 0
        layers = self.chosen_layers(model.depth)
        for images in batches:
            store: dict[tuple[str, int], Tensor] = {}
            record = Record(frozenset(("attn.heads", k) for k in layers), store)
            with torch.no_grad():
                model.forward_intermediates(images, base.with_edits(record), layers=0)
            for (_, k), heads in store.items():
                total = heads.double().sum(dim=0)  # (T, H, hd)
                sums[k] = sums[k] + total if k in sums else total
            count += len(images)
        if count == 0:
            raise ConfigError("head_ablate:value=mean: no images to take the means over")
        return replace(self, means={k: (s / count).float() for k, s in sums.items()})
