"""timm rotary embeddings at a given α: every rope class the adapter supports, with a builder of its table whose
angles are all multiplied by α (our extension of the paper's α to RoPE: it interpolates towards no rotation).
Each builder calls timm's own table code with α-scaled frequencies or coordinates. :func:`rope_table` is the table
Eva hands its blocks, at the model's grid or at another one (``pe_resample``: the table timm's dynamic-size path
builds for that grid, ``rope.get_embed(shape=...)``, with its own coordinate options).

Imports: torch, timm (lazily, inside the functions).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
from torch import Tensor, nn

__all__ = ["RopeBuilder", "rope_kinds", "rope_table"]

RopeBuilder = Callable[[nn.Module, list[int], float, bool], Tensor]



def rope_kinds() -> dict[type, tuple[str, RopeBuilder]]:
    """timm rope class → (our name, builder of its table with every angle multiplied by α)."""
    from timm.layers import pos_embed_sincos as pes

    kinds: dict[type, tuple[str, RopeBuilder]] = {}
    if hasattr(pes, "RotaryEmbeddingCat") and hasattr(pes, "build_rotary_pos_embed"):
        kinds[pes.RotaryEmbeddingCat] = ("rope", _scaled_rope_cat)
    if hasattr(pes, "RotaryEmbeddingMixed") and hasattr(pes, "get_mixed_freqs"):
        kinds[pes.RotaryEmbeddingMixed] = ("rope_mixed", _scaled_rope_mixed)
    dinov3 = getattr(pes, "RotaryEmbeddingDinoV3", None)
    if dinov3 is not None and hasattr(pes, "make_coords_dinov3") and hasattr(dinov3, "_get_pos_embed_from_coords"):
        kinds[pes.RotaryEmbeddingDinoV3] = ("rope_dinov3", _scaled_rope_dinov3)
    return kinds


def rope_table(
    rope: nn.Module, builder: RopeBuilder, grid: tuple[int, int], native: tuple[int, int], alpha: float, dynamic: bool
) -> Tensor:
    """The rotary table for a pass on ``grid`` (the model's is ``native``) with every angle × α: exactly timm's own
    at α = 1, the cached table or the one built for the grid as ``Eva._pos_embed`` chooses (``dynamic``: the model's
    ``dynamic_img_size``); on another grid, the table its dynamic-size path builds there."""
    shape = [int(grid[0]), int(grid[1])]
    if tuple(grid) != tuple(native):  # a cached table ignores the shape asked for: build the grid's as timm does
        return builder(rope, shape, float(alpha), True)
    table = rope.get_embed(shape=shape) if dynamic or not hasattr(rope, "feat_shape") else rope.get_embed()
    if alpha == 1.0:
        return table
    # The rebuilt table never applies timm's train-time coordinate augmentation (eval is assumed).
    return builder(rope, shape, float(alpha), dynamic).to(device=table.device, dtype=table.dtype)


def _scaled_rope_cat(rope: nn.Module, shape: list[int], alpha: float, dynamic: bool) -> Tensor:
    """Axial RoPE: angle = grid coordinate × band, so bands × α scale every angle by α."""
    from timm.layers.pos_embed_sincos import build_rotary_pos_embed

    # The same grid options timm's RotaryEmbeddingCat passes, limited to what this timm accepts.
    options = {
        "in_pixels": rope.in_pixels,
        "ref_feat_shape": rope.ref_feat_shape,
        "grid_offset": rope.grid_offset,
        "grid_indexing": rope.grid_indexing,
        "rotate_half": getattr(rope, "rotate_half", None),
        "grid_type": getattr(rope, "grid_type", None),
        "normalize_coords": getattr(rope, "normalize_coords", None),
    }
    accepted = inspect.signature(build_rotary_pos_embed).parameters
    options = {k: v for k, v in options.items() if k in accepted and v is not None}
    sin, cos = build_rotary_pos_embed(
        shape, bands=rope.bands * alpha, device=rope.bands.device, dtype=torch.float32, **options
    )  # each (N, head_dim)
    return torch.cat([sin, cos], dim=-1)  # (N, 2 * head_dim)


def _scaled_rope_mixed(rope: nn.Module, shape: list[int], alpha: float, dynamic: bool) -> Tensor:
    """Mixed RoPE: angle = x·f_x + y·f_y with learned frequencies, so freqs × α scale the angles."""
    from timm.layers.pos_embed_sincos import get_mixed_freqs, get_mixed_grid

    if not dynamic and rope.t_x is not None:
        t_x, t_y = rope.t_x, rope.t_y  # (N,) each, the cached grid timm uses
    else:
        t_x, t_y = get_mixed_grid(shape, grid_indexing=rope.grid_indexing, device=rope.freqs.device)
    return get_mixed_freqs(rope.freqs * alpha, t_x, t_y)  # (depth, H, N, 2 * head_dim)


def _scaled_rope_dinov3(rope: nn.Module, shape: list[int], alpha: float, dynamic: bool) -> Tensor:
    """DINOv3 RoPE: angle = 2π · coordinate / period, so coordinates × α scale the angles."""
    from timm.layers.pos_embed_sincos import make_coords_dinov3

    coords = make_coords_dinov3(
        shape[0],
        shape[1],
        normalize_coords=rope.normalize_coords,
        grid_indexing=rope.grid_indexing,
        grid_offset=rope.grid_offset,
    )  # (N, 2)
    sin, cos = rope._get_pos_embed_from_coords(coords * alpha)  # each (N, head_dim)
    return torch.cat([sin, cos], dim=-1)  # (N, 2 * head_dim)
