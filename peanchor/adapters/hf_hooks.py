"""The hook points of a transformers vision transformer (docs/interventions.md), as hooks and swaps on the model's own
modules for one step of a pass (:mod:`peanchor.adapters.hf_vit`), undone when it ends:

* ``pe.table``: the learned table (α applied) as the embeddings hand it to the tokens. For the pass, the embeddings'
  own ``interpolate_pos_encoding`` is replaced by one returning the edited table, and the forward is asked to
  interpolate (DINOv2 always does), so the table is added where transformers adds it, at any grid. Its prefix rows
  are CLS's (and DeiT's distillation token's); registers and SigLIP have none. Offered at the model's native
  resolution (elsewhere the table is transformers' interpolation);
* ``input.grid``: the same families, at the native resolution;
* ``rope.tables``: DINOv3's ``(cos, sin)``, which its encoder hands every layer, edited into one pair per layer
  (:func:`edited_rope`) handed as each layer's ``position_embeddings``; its planes pair channel ``j`` with
  ``j + hd/2`` (rotate-half);
* ``blocks.{k}.attn.heads``: the merged heads as the attention's output projection (``o_proj`` / ``out_proj``)
  receives them, viewed ``(B, T, H, hd)``; ``blocks.{k}.attn``: the attention module's output; ``.mlp``: the MLP's;
  ``.residual``: the layer's output (applied by the template pass, between layers).

The pass's own plumbing is here too: α as a parameter or buffer × α for a step (:func:`scaled_slot`), RPI as a hook
on the patch embedding, the probes on each layer's first norm and the attention weights from the eager path.

Imports: torch; :mod:`peanchor.adapters` (hf_split), :mod:`peanchor.interventions`, :mod:`peanchor.models`
(interface).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.adapters.hf_split import shadowed
from peanchor.interventions import EditPass, PETable, RopeTables, axial_planes, permute_tokens
from peanchor.models.interface import AttentionSink

__all__ = ["attention_hooks", "edited_rope", "edited_table", "permuted_patches", "probe_hooks", "rope_planes",
           "scaled_slot", "site_hooks", "table_of"]  # fmt: skip


@contextmanager
def scaled_slot(owner: nn.Module, store: str, key: str, alpha: float) -> Iterator[None]:
    """``owner``'s parameter or buffer ``key`` × α for the block; the original tensor is put back after."""
    slots = getattr(owner, store)
    original = slots[key]
    slots[key] = original.detach() * alpha  # a plain tensor in the slot: forward reads it like the original
    try:
        yield
    finally:
        slots[key] = original


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

    with shadowed(embeddings, "interpolate_pos_encoding", interpolate):
        yield


def rope_planes(cos: Tensor, sin: Tensor, grid: tuple[int, int], inv_freq: Tensor) -> tuple:
    """DINOv3's planes: angles ``(N, 2, hd/4)`` flattened and tiled twice, so channel ``j`` pairs with ``j + hd/2``;
    pair ``j`` turns at ``inv_freq[j % (hd/4)]``."""
    hd = cos.shape[-1]
    pairs = [(j, j + hd // 2) for j in range(hd // 2)]
    speeds = [float(inv_freq[j % inv_freq.numel()]) for j in range(hd // 2)]
    return axial_planes(cos, sin, grid, pairs, speeds)


def edited_rope(position_embeddings: tuple[Tensor, Tensor], run: EditPass) -> list[tuple[Tensor, Tensor]]:
    """DINOv3's ``(cos, sin)`` ``(N, hd)`` as the encoder hands every layer, edited by ``run``: one pair
    ``(H|1, N, hd)`` for every layer (one for all when the edit leaves them alike)."""
    cos, sin = position_embeddings
    t = run.rope(RopeTables(cos[None, None], sin[None, None], run.hooks.planes))  # (L|1, H|1, N, hd) each
    return [(t.cos[i], t.sin[i]) for i in range(t.cos.shape[0])]


@contextmanager
def site_hooks(layers: nn.ModuleList, attention: str, out_proj: str, run: EditPass, num_heads: int) -> Iterator[None]:
    """Forward hooks for the block sites ``run`` acts at inside a layer (``residual`` is the template pass's)."""
    handles = []
    try:
        for k, layer in enumerate(layers):
            attn = getattr(layer, attention)
            if run.acts_on_block("attn.heads", k):
                handles.append(getattr(attn, out_proj).register_forward_pre_hook(run.heads_pre_hook(k, num_heads)))
            for site, module in (("attn", attn), ("mlp", layer.mlp)):
                if run.acts_on_block(site, k):
                    handles.append(module.register_forward_hook(run.output_hook(site, k)))
        yield
    finally:
        for h in handles:
            h.remove()


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
def probe_hooks(norms: list[nn.Module], sink: list[Tensor]) -> Iterator[None]:
    """Hooks on the layers' first ``norms``, appending their output ``(B, P + N, D)`` to ``sink``."""
    handles = [norm.register_forward_hook(lambda _m, _i, out: sink.append(out)) for norm in norms]
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
