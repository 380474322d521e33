"""Relative position bias (Swin-style): a learned per-head bias on the attention logits per 2D offset.

Every pair of slots ``(i, j)`` on an ``H × W`` grid has an offset ``(dy, dx) = (y_i − y_j, x_i − x_j)``
with ``dy ∈ [−(H−1), H−1]`` and ``dx ∈ [−(W−1), W−1]``: ``(2H−1)(2W−1)`` possible offsets. A table
with one row per offset and one column per head gives the bias added to ``q·k/√d`` for that pair.
Swin keeps one table per block; so do we by default.

Anchoring: relative slot offsets, by construction. The bias of a pair depends on nothing but the
offset of its two slots, so the attention logits of two tokens with the same content depend only on
where their slots are relative to each other (tested in ``tests/pe/test_relative.py``). Under RPI the
bias stays on the slots and the content moves.

Imports: torch; :mod:`peanchor.pe.base`, :mod:`peanchor.pe.registry`.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


def relative_offset_index(grid: tuple[int, int]) -> Tensor:
    """Row of the offset table for every slot pair: ``(N, N)`` with ``N = H·W`` row-major slots.

    ``index[i, j] = (dy + H − 1)·(2W − 1) + (dx + W − 1)`` for ``(dy, dx) = (y_i − y_j, x_i − x_j)``,
    so equal offsets share a row and the values span ``0 .. (2H−1)(2W−1) − 1``.

    >>> idx = relative_offset_index((2, 2))
    >>> idx.tolist()  # slots (0,0) (0,1) (1,0) (1,1); offset (0, 0) is row 4 of 9
    [[4, 3, 1, 0], [5, 4, 2, 1], [7, 6, 4, 3], [8, 7, 5, 4]]
    """
    rows, cols = grid
    slot = torch.arange(rows * cols)
    y, x = slot // cols, slot % cols  # (N,)
    dy = y[:, None] - y[None, :] + (rows - 1)  # (N, N), shifted to start at 0
    dx = x[:, None] - x[None, :] + (cols - 1)  # (N, N)
    return dy * (2 * cols - 1) + dx  # (N, N)


@PE_REGISTRY.register
class RelativePositionBias(PositionalEncoding):
    """A learned 2D relative position bias per head, one table per block (``shared=True``: one for all).

    The table ``(L|1, (2H−1)(2W−1), heads)`` is initialised trunc-normal(std 0.02), as in Swin.
    ``alpha`` multiplies the whole bias (0 removes it exactly).

    CLS has no grid position. ``cls="zero"`` (the default) gives every logit involving CLS a zero
    bias, so CLS attends by content only and the PE is purely relative. ``cls="learned"`` adds three
    learned per-head scalars per table (BEiT's choice): CLS→patch, patch→CLS and CLS→CLS; they are
    constant over slots, so they carry no positional information either.
    """

    name = "relbias"
    declares = PEDeclaration(kinds=("bias",), relative=True, alpha="the attention bias",
                             pe_zero="nothing: no edit removes a learned bias")  # fmt: skip

    anchoring = "relative offsets between slots, by construction (a learned bias per (dy, dx) offset)"
    scalable = True
    any_grid = False  # its offset index is built for the trained grid

    def __init__(self, ctx: PEContext, cls: Literal["zero", "learned"] = "zero", shared: bool = False) -> None:
        super().__init__(ctx)
        if cls not in ("zero", "learned"):
            raise ValueError(f"relbias cls must be 'zero' or 'learned', got {cls!r}")
        rows, cols = ctx.grid
        tables = 1 if shared else ctx.depth
        self.cls_mode = cls
        self.shared = shared
        num_offsets = (2 * rows - 1) * (2 * cols - 1)
        self.table = nn.Parameter(nn.init.trunc_normal_(torch.empty(tables, num_offsets, ctx.num_heads), std=0.02))
        if cls == "learned":
            # [CLS→patch, patch→CLS, CLS→CLS] per table and head.
            self.cls_bias = nn.Parameter(nn.init.trunc_normal_(torch.empty(tables, 3, ctx.num_heads), std=0.02))
        self.register_buffer("index", relative_offset_index(ctx.grid), persistent=False)  # (N, N)

    def attn_bias(self, alpha: float) -> Tensor | None:
        if alpha == 0:
            return None  # no bias at all: exactly the position-free attention
        p = self.ctx.num_prefix
        patch = self.table[:, self.index].permute(0, 3, 1, 2)  # (L|1, H, N, N)
        if self.cls_mode == "zero":
            bias = F.pad(patch, (p, 0, p, 0))  # (L|1, H, T, T), zeros on CLS rows and columns
        else:
            tables, heads, n, _ = patch.shape
            c = self.cls_bias[..., None, None]  # (L|1, 3, H, 1, 1)
            top = torch.cat((c[:, 2].expand(tables, heads, p, p), c[:, 0].expand(tables, heads, p, n)), dim=-1)
            rest = torch.cat((c[:, 1].expand(tables, heads, n, p), patch), dim=-1)  # (L|1, H, N, T)
            bias = torch.cat((top, rest), dim=-2)  # (L|1, H, T, T)
        return alpha * bias

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, cls={self.cls_mode!r}, tables={self.table.shape[0]}"
