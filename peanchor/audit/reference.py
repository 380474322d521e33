"""The audit's independent reference for what a positional encoding computes, built from what the model declares
(its config attributes, its learned tables and frequencies), never by calling the library's PE code: rotary angles
for timm's axial, mixed and DINOv3 ropes and for transformers' DINOv3, the rotation in the half or interleaved
layout, a learned table resampled by ``F.interpolate`` at a declared mode and antialias, and BEiT's relative
position bias gathered from its table by slot offsets (:func:`relative_bias`).

Angles are ``(..., N, hd/2)``, one per rotation plane in frequency order; :func:`rotate` pairs plane ``j`` with
channels ``(j, j + hd/2)`` (``half``) or ``(2j, 2j + 1)`` (``interleaved``). Everything is computed in float64.

Imports: torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["RotaryReference", "hf_dinov3_reference", "layout_table", "reference_probs", "relative_bias",
           "resample_table", "rotate", "timm_rope_reference"]  # fmt: skip

LAYOUTS = ("half", "interleaved")


@dataclass(frozen=True)
class RotaryReference:
    """Rotary angles ``(L|1, H|1, N, hd/2)`` (float64) and the layout the model declares (``half``/``interleaved``),
    with ``source``: the declared facts the angles come from."""

    angles: Tensor
    layout: str
    source: str


def layout_table(values: Tensor, layout: str) -> Tensor:
    """Per-plane values ``(..., hd/2)`` spread over the head's channels ``(..., hd)`` as ``layout`` pairs them."""
    if layout == "half":
        return torch.cat([values, values], dim=-1)
    return values.repeat_interleave(2, dim=-1)


def rotate(x: Tensor, angles: Tensor, layout: str, pairing: str | None = None) -> Tensor:
    """``x`` ``(..., N, hd)`` rotated plane by plane by ``angles`` ``(..., N, hd/2)`` in ``layout``; ``pairing``
    (default: ``layout``) pairs the channels otherwise than the table is laid out (a fault, for the diagnosis)."""
    cos, sin = layout_table(angles.cos(), layout), layout_table(angles.sin(), layout)  # (..., N, hd)
    if (pairing or layout) == "half":
        a, b = x.chunk(2, dim=-1)
        turned = torch.cat([-b, a], dim=-1)  # the partner channel j + hd/2, signed
    else:
        turned = torch.stack([-x[..., 1::2], x[..., 0::2]], dim=-1).flatten(-2)  # partner 2j + 1 / 2j, signed
    return x * cos + turned * sin


def _index_coords(size: int, offset: float, ref: int | None) -> Tensor:
    t = torch.arange(size, dtype=torch.float64) + offset
    return t / size * ref if ref is not None else t


def _centered_coords(size: int, denom: float, offset: float) -> Tensor:
    return (torch.arange(size, dtype=torch.float64) + 0.5 + offset) / denom * 2.0 - 1.0


def _axes_first(grid: tuple[int, int], indexing: str) -> list[int]:
    """The coordinate channels' order: (row, col) for ``ij``, (col, row) for ``xy``."""
    return [0, 1] if indexing == "ij" else [1, 0]


def _plane_angles(coords: list[Tensor], grid: tuple[int, int], order: list[int], speeds: Tensor) -> Tensor:
    """``(N, 2·F)``: for each coordinate channel in ``order``, its coordinate × every speed (row-major slots)."""
    rows, cols = grid
    y = coords[0][:, None].expand(rows, cols)
    x = coords[1][None, :].expand(rows, cols)
    axes = [y.flatten(), x.flatten()]  # (N,) each
    return torch.cat([axes[i][:, None] * speeds[None, :] for i in order], dim=-1)


def timm_rope_reference(rope: Any, grid: tuple[int, int], head_dim: int) -> RotaryReference | str:
    """timm's rope module's angles at ``grid`` from what it declares; a string saying why not where the reference
    does not model the module's options."""
    kind = type(rope).__name__
    indexing = getattr(rope, "grid_indexing", "ij")
    if indexing not in ("ij", "xy"):
        return f"grid_indexing={indexing!r} is not modelled"
    order = _axes_first(grid, indexing)
    if kind == "RotaryEmbeddingCat":
        return _timm_axial(rope, grid, order)
    if kind == "RotaryEmbeddingDinoV3":
        return _timm_dinov3(rope, grid, order)
    if kind == "RotaryEmbeddingMixed":
        freqs = rope.freqs.detach().double()  # (2, depth, H, hd/2): the learned frequencies of each channel
        rows, cols = grid
        y, x = torch.meshgrid(torch.arange(rows, dtype=torch.float64), torch.arange(cols, dtype=torch.float64),
                              indexing="ij")  # fmt: skip
        first, second = (y.flatten(), x.flatten()) if indexing == "ij" else (x.flatten(), y.flatten())  # (N,)
        angles = first[:, None] * freqs[0][:, :, None, :] + second[:, None] * freqs[1][:, :, None, :]
        said = f"{kind}: learned freqs {tuple(freqs.shape)}, indexing {indexing}"
        return RotaryReference(angles, "interleaved", said)
    return f"{kind} is not modelled"


def _timm_axial(rope: Any, grid: tuple[int, int], order: list[int]) -> RotaryReference | str:
    grid_type = getattr(rope, "grid_type", None) or ("pixel" if rope.in_pixels else "index")
    count = int(rope.dim) // 4
    if rope.in_pixels:
        top = float(rope.max_res)
        if rope.linear_bands:
            speeds = torch.linspace(1.0, top / 2, count, dtype=torch.float64) * math.pi
        else:
            speeds = 2 ** torch.linspace(0, math.log(top, 2) - 1, count, dtype=torch.float64) * math.pi
        said = f"pixel bands to max_res {top:g}"
    else:
        speeds = float(rope.temperature) ** (-torch.arange(count, dtype=torch.float64) / count)
        said = f"base {float(rope.temperature):g}"
    ref = rope.ref_feat_shape
    offset = float(rope.grid_offset)
    if grid_type == "index":
        coords = [_index_coords(s, offset, None if ref is None else int(ref[i])) for i, s in enumerate(grid)]
    elif grid_type == "pixel":
        coords = [torch.linspace(-1.0, 1.0, s, dtype=torch.float64) for s in grid]
    else:
        return f"grid_type={grid_type!r} is not modelled"
    angles = _plane_angles(coords, grid, order, speeds)
    layout = "half" if getattr(rope, "rotate_half", False) else "interleaved"
    return RotaryReference(angles[None, None], layout, f"axial RoPE, {said}, {grid_type} grid, {layout}")


def _timm_dinov3(rope: Any, grid: tuple[int, int], order: list[int]) -> RotaryReference | str:
    count = int(rope.dim) // 4
    if rope.min_period is not None and rope.max_period is not None:
        steps = torch.linspace(0, 1, count, dtype=torch.float64)
        periods = rope.min_period * (rope.max_period / rope.min_period) ** steps
        said = f"periods {rope.min_period:g}..{rope.max_period:g}"
    else:
        periods = float(rope.temperature) ** (torch.arange(count, dtype=torch.float64) / count)
        said = f"base {float(rope.temperature):g}"
    norm = rope.normalize_coords
    denoms = {"separate": [float(s) for s in grid], "max": [float(max(grid))] * 2, "min": [float(min(grid))] * 2}
    if norm not in denoms:
        return f"normalize_coords={norm!r} is not modelled"
    coords = [_centered_coords(s, d, float(rope.grid_offset)) for s, d in zip(grid, denoms[norm])]
    angles = _plane_angles(coords, grid, order, 2 * math.pi / periods)
    layout = "half" if rope.rotate_half else "interleaved"
    return RotaryReference(angles[None, None], layout, f"DINOv3 RoPE, {said}, centred coordinates, {layout}")


def hf_dinov3_reference(config: Any, grid: tuple[int, int]) -> RotaryReference:
    """transformers DINOv3's angles at ``grid`` from its config (``rope_theta``, the head size): patch centres
    in [-1, 1] per axis, rows first, angle = 2π · coordinate · theta^(-j / (hd/4)); the half layout."""
    head_dim = int(config.hidden_size) // int(config.num_attention_heads)
    count = head_dim // 4
    speeds = 2 * math.pi * float(config.rope_theta) ** (-torch.arange(count, dtype=torch.float64) / count)
    coords = [_centered_coords(s, float(s), 0.0) for s in grid]
    angles = _plane_angles(coords, grid, [0, 1], speeds)
    return RotaryReference(angles[None, None], "half", f"DINOv3 RoPE, base {float(config.rope_theta):g}, half")


def resample_table(table: Tensor, old: tuple[int, int], new: tuple[int, int], mode: str, antialias: bool) -> Tensor:
    """A table's patch rows ``(1, old_rows·old_cols, D)`` resampled to ``new`` (row-major) by ``F.interpolate``."""
    if tuple(old) == tuple(new):
        return table
    d = table.shape[-1]
    image = table.double().reshape(1, *old, d).permute(0, 3, 1, 2)  # (1, D, rows, cols)
    kwargs: dict[str, Any] = {"align_corners": False} if mode in ("bilinear", "bicubic") else {}
    if mode in ("bilinear", "bicubic"):
        kwargs["antialias"] = antialias
    out = F.interpolate(image, size=tuple(new), mode=mode, **kwargs)
    return out.permute(0, 2, 3, 1).reshape(1, new[0] * new[1], d)


def reference_probs(q: Tensor, k: Tensor, scale: float, rope: RotaryReference | None, layer: int,
                    prefix: int, turn: Callable | None = None, bias: Tensor | None = None) -> Tensor:  # fmt: skip
    """``softmax(q'·k'ᵀ·scale + bias)`` in float64, ``q'``/``k'`` the patch slots (after ``prefix`` tokens)
    rotated by the reference angles of ``layer`` in the declared layout. q, k: ``(B, H, T, hd)``; ``bias``:
    ``(L|1, H, T, T)``, the declared relative position bias (its ``layer`` slice is added). ``turn(x, angles,
    layout)`` replaces the rotation (a suspect, for the diagnosis)."""
    q, k = q.double(), k.double()
    if rope is not None:
        angles = rope.angles[layer if rope.angles.shape[0] > 1 else 0]  # (H|1, N, hd/2)
        how = turn or rotate
        q = torch.cat([q[:, :, :prefix], how(q[:, :, prefix:], angles, rope.layout)], dim=2)
        k = torch.cat([k[:, :, :prefix], how(k[:, :, prefix:], angles, rope.layout)], dim=2)
    logits = (q * scale) @ k.transpose(-2, -1)  # (B, H, T, T)
    if bias is not None:
        logits = logits + bias[layer if bias.shape[0] > 1 else 0].double()
    return logits.softmax(dim=-1)


def relative_bias(table: Tensor, grid: tuple[int, int]) -> Tensor:
    """BEiT's relative position bias as its papers define it, ``(H, 1 + N, 1 + N)`` in float64, from its table
    ``((2h-1)(2w-1) + 3, H)``: the patch pair (query i, key j) reads the row of the offset
    ``(row_i - row_j, col_i - col_j)``, offsets laid out row-major from ``(-(h-1), -(w-1))``; the last three rows
    are CLS → patch, patch → CLS and CLS → CLS. Built from the slot coordinates, not from the model's index."""
    rows, cols = grid
    assert table.shape[0] == (2 * rows - 1) * (2 * cols - 1) + 3, "the table does not fit the grid"
    t = table.double()  # (R, H)
    n, last = rows * cols, table.shape[0]
    slot_row = torch.arange(n) // cols  # (N,)
    slot_col = torch.arange(n) % cols
    d_row = slot_row[:, None] - slot_row[None, :] + rows - 1  # (N, N) in [0, 2h-2]
    d_col = slot_col[:, None] - slot_col[None, :] + cols - 1  # (N, N) in [0, 2w-2]
    bias = t.new_empty(n + 1, n + 1, t.shape[1])  # (1 + N, 1 + N, H)
    bias[1:, 1:] = t[d_row * (2 * cols - 1) + d_col]
    bias[0, 1:], bias[1:, 0], bias[0, 0] = t[last - 3], t[last - 2], t[last - 1]
    return bias.permute(2, 0, 1)  # (H, 1 + N, 1 + N)
