"""The hook points of a transformers vision transformer (docs/interventions.md), as hooks on the model's own modules
for one pass, removed when it ends:

* ``pe.table``: the learned table (α applied) as the embeddings hand it to the tokens. For the pass, the embeddings'
  own ``interpolate_pos_encoding`` is replaced by one returning the edited table, and the forward is asked to
  interpolate (DINOv2 always does), so the table is added where transformers adds it, at any grid. Its prefix rows
  are CLS's (and DeiT's distillation token's); registers and SigLIP have none. Offered at the model's native
  resolution (elsewhere the table is transformers' interpolation);
* ``input.grid``: the same families, at the native resolution;
* ``rope.tables``: DINOv3's ``(cos, sin)``, shared by its layers, replaced per layer through each layer's
  ``position_embeddings`` argument; its planes pair channel ``j`` with ``j + hd/2`` (rotate-half);
* ``blocks.{k}.attn.heads``: the merged heads as the attention's output projection (``o_proj`` / ``out_proj``)
  receives them, viewed ``(B, T, H, hd)``; ``blocks.{k}.attn``: the attention module's output; ``.mlp``: the MLP's;
  ``.residual``: the layer's output.

The pass's own plumbing is here too: RPI as a hook on the patch embedding, the probes on each layer's first norm
(ending a truncated pass early), the attention weights from the eager path, and a pass started at a later layer.

Imports: torch; :mod:`peanchor.interventions`, :mod:`peanchor.models` (interface).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.interventions import EditPass, PETable, RopeTables, axial_planes, permute_tokens
from peanchor.models.interface import AttentionSink

__all__ = ["StopPass", "attention_hooks", "edited_rope", "edited_table", "permuted_patches", "probe_hooks",
           "rope_planes", "site_hooks", "started_layers", "table_of"]  # fmt: skip


def table_of(param: Tensor, num_patches: int, grid: tuple[int, int], alpha: float) -> PETable:
    """A family's table parameter (``(1, P + N, D)``, or ``(P + N, D)`` for CLIP and SigLIP) as a :class:`PETable`."""
    table = param[None] if param.dim() == 2 else param  # (1, P + N, D)
    table = table if alpha == 1.0 else table * alpha
    p = table.shape[1] - num_patches
    return PETable(table[:, :p] if p else None, table[:, p:], grid)


@contextmanager
def edited_table(embeddings: nn.Module, table: PETable) -> Iterator[None]:
    """During the block, the embeddings add ``table`` (prefix rows first) whatever the images' size."""
    rows = torch.cat((table.prefix, table.patches), dim=1) if table.prefix is not None else table.patches

    def interpolate(_embeddings: Tensor, _height: int, _width: int) -> Tensor:
        return rows  # (1, P + N', D)

    embeddings.interpolate_pos_encoding = interpolate  # an instance attribute shadows the method for this pass
    try:
        yield
    finally:
        del embeddings.interpolate_pos_encoding


def rope_planes(cos: Tensor, sin: Tensor, grid: tuple[int, int], inv_freq: Tensor) -> tuple:
    """DINOv3's planes: angles ``(N, 2, hd/4)`` flattened and tiled twice, so channel ``j`` pairs with ``j + hd/2``;
    pair ``j`` turns at ``inv_freq[j % (hd/4)]``."""
    hd = cos.shape[-1]
    pairs = [(j, j + hd // 2) for j in range(hd // 2)]
    speeds = [float(inv_freq[j % inv_freq.numel()]) for j in range(hd // 2)]
    return axial_planes(cos, sin, grid, pairs, speeds)


@contextmanager
def edited_rope(rope: nn.Module, layers: nn.ModuleList, run: EditPass) -> Iterator[None]:
    """The rope module's ``(cos, sin)`` edited by ``run``; layer ``k`` gets its own slice ``(H|1, N, hd)``."""
    edited: list[RopeTables] = []

    def after_rope(_m: nn.Module, _i: Any, out: tuple[Tensor, Tensor]) -> None:
        cos, sin = out  # (N, hd) each
        edited.append(run.rope(RopeTables(cos[None, None], sin[None, None], run.hooks.planes)))

    def before_layer(layer: int):  # type: ignore[no-untyped-def]
        def hook(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            t = edited[-1]
            i = layer if t.cos.shape[0] > 1 else 0
            return args, dict(kwargs, position_embeddings=(t.cos[i], t.sin[i]))

        return hook

    with ExitStack() as stack:
        handles = [rope.register_forward_hook(after_rope)]
        handles += [layer.register_forward_pre_hook(before_layer(k), with_kwargs=True)
                    for k, layer in enumerate(layers)]  # fmt: skip
        for h in handles:
            stack.callback(h.remove)
        yield


@contextmanager
def site_hooks(layers: nn.ModuleList, attention: str, out_proj: str, run: EditPass, num_heads: int) -> Iterator[None]:
    """Forward hooks for the block sites ``run`` acts at."""
    handles = []
    try:
        for k, layer in enumerate(layers):
            attn = getattr(layer, attention)
            if run.acts_on_block("attn.heads", k):
                handles.append(getattr(attn, out_proj).register_forward_pre_hook(run.heads_pre_hook(k, num_heads)))
            for site, module in (("attn", attn), ("mlp", layer.mlp), ("residual", layer)):
                if run.acts_on_block(site, k):
                    handles.append(module.register_forward_hook(run.output_hook(site, k)))
        yield
    finally:
        for h in handles:
            h.remove()


class StopPass(Exception):
    """Raised by the last probe hook a truncated pass needs: the rest of the forward is not computed."""


@contextmanager
def permuted_patches(patch: nn.Module, perm: Tensor | None) -> Iterator[None]:
    """RPI: the patch embedding's output reordered along its token axis, before any position is added."""
    if perm is None:
        yield
        return

    def hook(_m: nn.Module, _i: Any, out: Tensor) -> Tensor:
        if out.dim() == 4:  # a Conv2d's (B, D, h, w): permute its flattened, row-major grid
            b, d, h, w = out.shape
            moved = permute_tokens(out.flatten(2).transpose(1, 2), perm)  # (B, N, D)
            return moved.transpose(1, 2).reshape(b, d, h, w)
        return permute_tokens(out, perm)  # (B, N, D)

    handle = patch.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


@contextmanager
def probe_hooks(norms: list[nn.Module], sink: list[Tensor], num_prefix: int, stop_at: int | None) -> Iterator[None]:
    """Hooks on the layers' first ``norms``, appending their output minus the prefix tokens to ``sink``; the pass
    ends (:class:`StopPass`) once ``sink`` holds ``stop_at`` probes (None: it runs to the end)."""

    def hook(_m: nn.Module, _i: Any, out: Tensor) -> None:
        sink.append(out[:, num_prefix:])  # (B, N, D): what attention sees, patch slots only
        if stop_at is not None and len(sink) == stop_at:
            raise StopPass

    handles = [norm.register_forward_hook(hook) for norm in norms]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def attention_hooks(model: nn.Module, layers: nn.ModuleList, attention: str,
                    sink: AttentionSink | None) -> Iterator[None]:  # fmt: skip
    """With a ``sink``, the pass runs transformers' eager attention, whose modules return their softmax weights, and
    hands each layer's to ``sink``; the attention implementation is put back after."""
    if sink is None:
        yield
        return
    before = model.config._attn_implementation
    model.set_attn_implementation("eager")  # the path that computes (and returns) the softmax weights
    handles = []
    for i, layer in enumerate(layers):

        def hook(_m: nn.Module, _i: Any, out: Any, i: int = i) -> None:
            sink(i, out[1])  # (B, H, T, T), prefix tokens first

        handles.append(getattr(layer, attention).register_forward_hook(hook))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        model.set_attn_implementation(before)


@contextmanager
def started_layers(backbone: nn.Module, layers_path: str, first: int, residual: Tensor) -> Iterator[None]:
    """For the pass, the encoder runs layers ``first`` on only, the first of them fed ``residual`` (the stream
    entering it in an earlier pass) in place of what the embeddings computed."""
    owner_path, _, name = layers_path.rpartition(".")
    owner = backbone.get_submodule(owner_path) if owner_path else backbone
    layers = getattr(owner, name)

    def feed(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        if args:
            return (residual, *args[1:]), kwargs
        return args, dict(kwargs, hidden_states=residual)

    handle = layers[first].register_forward_pre_hook(feed, with_kwargs=True)
    setattr(owner, name, nn.ModuleList(list(layers)[first:]))  # the same modules, the earlier ones left out
    try:
        yield
    finally:
        setattr(owner, name, layers)
        handle.remove()
