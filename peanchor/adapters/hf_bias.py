"""BEiT's relative position bias in transformers, as the ``pe.bias`` hook point and under α.

A ``BeitModel`` has a bias module (``BeitRelativePositionBias``: a ``relative_position_bias_table`` of
``(2h-1)(2w-1) + 3`` rows, one column per head, gathered into ``(1, H, T, T)``) in every layer
(``use_relative_position_bias``), one shared by all layers (``use_shared_relative_position_bias``, the model's
``shared_position_bias``), or both: a layer's attention adds the shared bias and its own to ``q·kᵀ``.

* α scales every bias table for the pass (the bias is a gather of its table, so that is the bias × α);
* ``pe.bias``: the bias each layer adds, ``(L|1, H, T, T)`` (shared plus own, α applied), edited; for the pass each
  layer's own bias module returns zeros and the layer is handed the edited bias as its ``attention_mask``, so that
  it adds exactly the edited bias (pe_zero: zeros, as with zeroed tables).

Imports: torch; :mod:`peanchor.interventions`, :mod:`peanchor.audit` (observe: BEiT's observer).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.interventions import EditPass

__all__ = ["beit_observer", "bias_modules", "edited_bias", "scaled_bias"]


def bias_modules(backbone: nn.Module, layers: nn.ModuleList) -> tuple[nn.Module | None, list[nn.Module | None]]:
    """The shared bias module (None: none) and each layer's own (None where it has none)."""
    own = [getattr(layer, "relative_position_bias", None) for layer in layers]
    return getattr(backbone, "shared_position_bias", None), own


@contextmanager
def scaled_bias(modules: list[nn.Module], alpha: float) -> Iterator[None]:
    """Every bias table × α for the pass; the original parameters are put back after."""
    saved = [m._parameters["relative_position_bias_table"] for m in modules]
    for module, table in zip(modules, saved):
        module._parameters["relative_position_bias_table"] = table.detach() * alpha  # type: ignore[assignment]
    try:
        yield
    finally:
        for module, table in zip(modules, saved):
            module._parameters["relative_position_bias_table"] = table


def _layer_biases(shared: nn.Module | None, own: list[nn.Module | None], grid: tuple[int, int]) -> Tensor:
    """What each layer adds to its attention logits, ``(L|1, H, T, T)``: one slice when only the shared bias is."""
    common = shared(grid)[0] if shared is not None else 0.0  # (H, T, T)
    if all(m is None for m in own):
        return common[None]  # type: ignore[index]
    return torch.stack([common + m(grid)[0] if m is not None else common + 0.0 for m in own])  # type: ignore[operator]


@contextmanager
def edited_bias(backbone: nn.Module, layers: nn.ModuleList, run: EditPass, grid: tuple[int, int]) -> Iterator[None]:
    """For the pass, each layer adds the bias ``run`` edited (see the module docstring)."""
    shared, own = bias_modules(backbone, layers)
    bias = _layer_biases(shared, own, grid)  # (L|1, H, T, T)
    edited = run.bias(bias)
    edited = torch.zeros_like(bias) if edited is None else edited

    def silenced(_m: nn.Module, _i: Any, out: Tensor) -> Tensor:
        return torch.zeros_like(out)  # the layer's own bias: the edited one is handed in whole

    def feed(layer: int):  # type: ignore[no-untyped-def]
        def hook(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            mask = edited[layer if edited.shape[0] > 1 else 0][None]  # (1, H, T, T)
            return args, dict(kwargs, attention_mask=mask)

        return hook

    with ExitStack() as stack:
        handles = [m.register_forward_hook(silenced) for m in own if m is not None]
        handles += [layer.register_forward_pre_hook(feed(k), with_kwargs=True) for k, layer in enumerate(layers)]
        for h in handles:
            stack.callback(h.remove)
        yield


def beit_observer(wrapped: Any) -> Any:
    """The audit's observer of a transformers BEiT: :class:`~peanchor.audit.observe.HFObserver`, whose declared
    embedding is BEiT's (CLS, then the patches, plus the absolute table where the model has one; BEiT runs at its
    native grid only, so the table is never resampled), whose bias tables (shared and per layer) are what removing
    the PE zeroes, and whose declared bias is peanchor's gather of those tables by slot offset
    (:func:`peanchor.audit.reference.relative_bias`), shared plus own in each layer."""
    from peanchor.audit.observe import HFObserver
    from peanchor.audit.reference import relative_bias

    class BeitObserver(HFObserver):
        def reference_embedding(self, patches: Tensor, grid: tuple[int, int], resample: tuple | None = None) -> Tensor:
            e = self.backbone.embeddings
            x = torch.cat([e.cls_token.expand(patches.shape[0], -1, -1), patches], dim=1)  # (B, 1 + N, D)
            return x if e.position_embeddings is None else x + e.position_embeddings

        def tables(self) -> list[Tensor]:
            table = self.backbone.embeddings.position_embeddings
            return [] if table is None else [table]

        def bias_tables(self) -> list[Tensor]:
            shared, own = bias_modules(self.backbone, self.layers)
            return [m.relative_position_bias_table for m in [shared, *own] if m is not None]

        def declared_bias(self, grid: tuple[int, int]) -> Tensor | None:
            shared, own = bias_modules(self.backbone, self.layers)
            common = relative_bias(shared.relative_position_bias_table, grid) if shared is not None else 0.0
            if all(m is None for m in own):
                return None if shared is None else common[None]  # type: ignore[index]  # (1, H, T, T)
            return torch.stack([common + (relative_bias(m.relative_position_bias_table, grid) if m is not None
                                          else 0.0) for m in own])  # type: ignore[misc]  # (L, H, T, T)

    return BeitObserver(wrapped)
