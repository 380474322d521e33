"""The hook points of a timm ViT (docs/interventions.md), on timm's own modules: what edits act at.

* ``pe.table``: the learned ``pos_embed`` (α applied), its prefix rows those of CLS and register tokens unless the
  model's ``no_embed_class`` leaves them without;
* ``rope.tables``: Eva's rotary table, timm's ``cat([sin, cos])`` layout read as cos and sin per channel. The planes
  are timm's channel pairs (interleaved ``(2b, 2b+1)``, or ``(b, b + hd/2)`` with ``rotate_half``); each plane's
  axis is read off the table itself (an ``x`` plane is constant down a column), and its frequency index orders the
  planes of an axis from the fastest (``bands`` for axial RoPE, ``periods`` for DINOv3's); a mixed RoPE's planes
  keep timm's order and have no single axis;
* ``input.grid``: models with a table or a rope; at another grid the rope's table is the one timm's dynamic-size
  path builds for it (``rope.get_embed(shape=...)``, timm's own coordinate options);
* ``blocks.{k}.attn.heads``: the merged heads ``(B, T, D)`` as the attention's output norm (``attn.norm``, the
  identity in most models) receives them, viewed ``(B, T, H, hd)``; ``blocks.{k}.attn`` and ``.mlp``: the outputs
  of ``block.attn`` and ``block.mlp`` (before layer scale); ``blocks.{k}.residual``: each block's output. A
  ``ParallelScalingBlock`` (attention and MLP in one module) offers ``residual`` only.

Imports: torch; :mod:`peanchor.interventions`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.interventions import BLOCK_SITES, EditPass, Plane, RopeTables, axial_planes

__all__ = ["block_sites", "capture_probes", "rope_planes", "site_hooks", "split_rope", "join_rope"]


def block_sites(blocks: nn.ModuleList) -> tuple[str, ...]:
    """The block sites every block of the model offers."""
    if all(hasattr(b, "attn") and hasattr(b, "mlp") and hasattr(b.attn, "proj") for b in blocks):
        return BLOCK_SITES
    return ("residual",)


def _heads_module(attn: nn.Module) -> nn.Module:
    """The module that receives the merged heads: the attention's output norm, else its projection."""
    norm = getattr(attn, "norm", None)
    return norm if isinstance(norm, nn.Module) else attn.proj


@contextmanager
def site_hooks(blocks: nn.ModuleList, run: EditPass, num_heads: int) -> Iterator[None]:
    """Forward hooks on the blocks' modules for the inner sites ``run`` acts at."""
    handles: list[Any] = []
    try:
        for layer, block in enumerate(blocks):
            if run.acts_on_block("attn.heads", layer):
                heads = _heads_module(block.attn)
                handles.append(heads.register_forward_pre_hook(run.heads_pre_hook(layer, num_heads)))
            for site in ("attn", "mlp"):
                if run.acts_on_block(site, layer):
                    handles.append(getattr(block, site).register_forward_hook(run.output_hook(site, layer)))
        yield
    finally:
        for h in handles:
            h.remove()


@contextmanager
def capture_probes(norms: list[nn.Module], sink: list[Tensor], num_prefix: int) -> Iterator[None]:
    """Forward hooks on the probe ``norms`` (each block's first norm), appending their output minus the
    ``num_prefix`` prefix tokens to ``sink``."""

    def hook(_module: nn.Module, _inputs: Any, out: Tensor) -> None:
        sink.append(out[:, num_prefix:])  # (B, N, D): what attention sees, patch slots only

    handles = [norm.register_forward_hook(hook) for norm in norms]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def split_rope(emb: Tensor) -> tuple[Tensor, Tensor]:
    """timm's ``cat([sin, cos], -1)`` table ``(..., N, 2hd)`` as cos, sin ``(L|1, H|1, N, hd)``."""
    sin, cos = emb.chunk(2, dim=-1)
    while cos.dim() < 4:
        sin, cos = sin[None], cos[None]
    return cos, sin


def join_rope(tables: RopeTables) -> Tensor:
    """Back to timm's layout: ``(L|1, H|1, N, 2hd)``."""
    return torch.cat((tables.sin, tables.cos), dim=-1)


def rope_planes(rope: nn.Module, emb: Tensor, grid: tuple[int, int], mixed: bool) -> tuple[Plane, ...]:
    """The rotation planes of a timm rope's table ``emb`` (see the module docstring)."""
    cos, sin = split_rope(emb)
    hd = cos.shape[-1]
    half = bool(getattr(rope, "rotate_half", False))
    pairs = [(b, b + hd // 2) if half else (2 * b, 2 * b + 1) for b in range(hd // 2)]
    if mixed:
        return tuple(Plane(None, b, pair) for b, pair in enumerate(pairs))
    return axial_planes(cos[0, 0], sin[0, 0], grid, pairs, _plane_speeds(rope, len(pairs)))


def _plane_speeds(rope: nn.Module, count: int) -> list[float]:
    """Each base plane's angular frequency (up to a common factor): ``bands``, or ``1 / periods`` for DINOv3."""
    bands = getattr(rope, "bands", None)
    if isinstance(bands, Tensor):
        per_axis = bands.abs().flatten().tolist()
    else:
        per_axis = (1.0 / rope.periods.double()).tolist()
    return [per_axis[b % len(per_axis)] for b in range(count)]

