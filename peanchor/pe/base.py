"""The interface between a ViT and its positional encoding.

The model calls five hooks per forward pass and knows nothing else about the PE:

* :meth:`PositionalEncoding.add` adds an absolute code to the token sequence (CLS first);
* :meth:`PositionalEncoding.rotary` returns cos/sin tables that rotate q and k of the patch tokens;
* :meth:`PositionalEncoding.rotation` returns general rotation matrices for q and k of the patch tokens
  (:class:`BlockRotation`: LieRE, ComRoPE, STRING);
* :meth:`PositionalEncoding.attn_bias` returns an additive attention bias;
* :meth:`PositionalEncoding.after_block` transforms the tokens between blocks (conditional PEs).

Every hook takes ``alpha`` (the paper's PE scale, 1 = as trained, 0 = no positional information).
PEs describe *slots*: the token permutation is applied to the content before any hook runs, so an
intervention never needs to reach inside a PE.

Imports: torch; :mod:`peanchor.pe` (declaration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.pe.declaration import PEDeclaration


@dataclass(frozen=True)
class PEContext:
    """What a positional encoding may know about the model it serves."""

    embed_dim: int
    num_heads: int
    depth: int
    grid: tuple[int, int]  # (rows, cols) of the patch grid
    num_prefix: int = 1  # CLS

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    def positions(self, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
        """Row-major (row, col) integer coordinates of every slot, each ``(N,)``."""
        rows, cols = self.grid
        idx = torch.arange(rows * cols, device=device)
        return idx // cols, idx % cols


@dataclass
class RotaryTables:
    """Per-slot rotation for q and k: ``cos``/``sin`` of shape ``(L|1, H|1, N, head_dim)``.

    Channels are rotated in ``groups`` equal chunks; inside a chunk, channel ``j`` pairs with
    ``j + chunk/2`` (the "rotate half" layout). ``groups=2`` is axial 2D RoPE with the x angle on the
    first half of the head and the y angle on the second (the paper's quarter split).
    """

    cos: Tensor
    sin: Tensor
    groups: int

    def layer(self, index: int) -> RotaryTables:
        i = index if self.cos.shape[0] > 1 else 0
        return RotaryTables(self.cos[i], self.sin[i], self.groups)  # (H|1, N, hd)

    def apply(self, t: Tensor, num_prefix: int) -> Tensor:
        """Rotate the patch tokens of ``t`` ``(B, H, T, hd)``; the first ``num_prefix`` stay as they are.

        Each pair ``(a, b)`` becomes ``(a·cos - b·sin, b·cos + a·sin)``, computed over the whole sequence as
        ``t·cos + swap(t)·sin±`` with ``sin±`` the sine negated on the pair's first channel, and ``cos = 1``,
        ``sin = 0`` on the prefix. These are the products and sums of rotating the patch tokens alone, to the bit
        (``(-b)·s`` and ``b·(-s)`` round alike), forwards and backwards; without the slices, the concatenation and
        the negated copy, a training step of the cpu preset's rope model is faster (benchmarks/bench_rotary.py).
        """
        cos, sin = self._signed(num_prefix)
        half = t.shape[-1] // (2 * self.groups)
        swapped = t.unflatten(-1, (self.groups, 2, half)).flip(-2).flatten(-3)  # (B, H, T, hd): (b, a) per pair
        return t * cos + swapped * sin

    def _signed(self, num_prefix: int) -> tuple[Tensor, Tensor]:
        """``cos`` and ``sin±`` padded for ``num_prefix`` leading tokens that are not rotated."""
        half = self.sin.shape[-1] // (2 * self.groups)
        pairs = self.sin.unflatten(-1, (self.groups, 2, half))
        signed = torch.stack((-pairs[..., 0, :], pairs[..., 1, :]), dim=-2).flatten(-3)
        if not num_prefix:
            return self.cos, signed
        rows = (0, 0, num_prefix, 0)  # (..., N, hd) -> (..., P + N, hd)
        return F.pad(self.cos, rows, value=1.0), F.pad(signed, rows, value=0.0)


@dataclass
class BlockRotation:
    """Per-slot block-diagonal rotations of q and k: ``mats`` ``(L|1, H|1, N, nb, b, b)``, ``nb`` blocks of ``b``
    channels (``nb · b = head_dim``); block ``j`` of a patch token's head vector becomes ``mats[..., j, :, :] @ v_j``.
    The prefix tokens are not rotated."""

    mats: Tensor

    def layer(self, index: int) -> BlockRotation:
        i = index if self.mats.shape[0] > 1 else 0
        return BlockRotation(self.mats[i])  # (H|1, N, nb, b, b)

    def apply(self, t: Tensor, num_prefix: int) -> Tensor:
        """Rotate the patch tokens of ``t`` ``(B, H, T, hd)`` with one layer's ``mats`` ``(H|1, N, nb, b, b)``."""
        nb, b = self.mats.shape[-3], self.mats.shape[-1]
        patches = t[:, :, num_prefix:].unflatten(-1, (nb, b))  # (B, H, N, nb, b)
        turned = torch.einsum("hnkij,bhnkj->bhnki", self.mats.to(t.dtype), patches).flatten(-2)  # (B, H, N, hd)
        return torch.cat((t[:, :, :num_prefix], turned), dim=2)  # (B, H, T, hd)

    def macs(self, images: int, num_heads: int, depth: int) -> int:
        """Multiply-adds of rotating q and k of ``images`` images in every block."""
        n, nb, b = self.mats.shape[-4], self.mats.shape[-3], self.mats.shape[-1]
        return 2 * depth * images * num_heads * n * nb * b * b


class PositionalEncoding(nn.Module):
    """Base class: no positional information at all (the paper's "ablated" model)."""

    name: ClassVar[str] = "none"
    #: One line for the docs: what the PE anchors, and whether by construction.
    anchoring: ClassVar[str] = "nothing: the model is permutation-equivariant on patch tokens"
    #: Whether ``alpha`` changes anything for this PE.
    scalable: ClassVar[bool] = False
    #: Whether it adds a table (:meth:`table_rows`), rotates q/k (:meth:`rotary_at`), and works at any patch grid
    #: given the positions (the hook points ``pe.table``, ``rope.tables`` and ``input.grid``: docs/interventions.md).
    has_table: ClassVar[bool] = False
    has_rotary: ClassVar[bool] = False
    any_grid: ClassVar[bool] = True
    #: Whether its attention bias is the hook point ``pe.bias`` and its general rotation ``pe.rotation`` (edits such
    #: as ``pe_zero`` reach them there; the relative bias of ``relbias`` is no hook point).
    has_bias: ClassVar[bool] = False
    has_rotation: ClassVar[bool] = False
    #: What the PE promises, for the audit (:mod:`peanchor.pe.declaration`); None: it declares nothing to check.
    declares: ClassVar[PEDeclaration | None] = PEDeclaration(kinds=("none",))

    def __init__(self, ctx: PEContext) -> None:
        super().__init__()
        self.ctx = ctx

    def add(self, x: Tensor, alpha: float) -> Tensor:
        """``x`` is ``(B, P + N, D)`` with the CLS token(s) first."""
        return x

    def rotary(self, alpha: float) -> RotaryTables | None:
        return None

    def table_rows(self, alpha: float) -> tuple[Tensor | None, Tensor] | None:
        """What :meth:`add` adds, α applied: prefix rows ``(1, p, D)`` (None: none) and patch rows ``(1, N, D)``;
        None for a PE without a table. ``add`` equals adding these rows (an edit changes them in between)."""
        return None

    def rotary_at(self, alpha: float, rows: Tensor, cols: Tensor) -> RotaryTables | None:
        """:meth:`rotary` at other slot coordinates ``(N',)`` each (float, in patches; the trained grid's are the
        integers). None for a PE without rotation."""
        return None

    def rotation(self, alpha: float) -> BlockRotation | None:
        """General rotations of q and k of the patch tokens, applied after :meth:`rotary`'s; None for none."""
        return None

    def rotation_at(self, alpha: float, rows: Tensor, cols: Tensor) -> BlockRotation | None:
        """:meth:`rotation` at other slot coordinates ``(N',)`` each (float, in patches of the trained grid)."""
        return None

    def attn_bias_at(self, alpha: float, rows: Tensor, cols: Tensor) -> Tensor | None:
        """:meth:`attn_bias` for slots at other coordinates ``(N',)`` each (a ``pe.bias`` PE; None: no bias)."""
        return None

    def macs(self, images: int) -> int:
        """Multiply-adds of the PE's own matrix products in one forward pass over ``images`` images (the model's
        FLOP count adds them; elementwise work is not counted). 0: it has none."""
        return 0

    def attn_bias(self, alpha: float) -> Tensor | None:
        """An additive bias ``(L|1, H, T, T)`` for the attention logits, or None."""
        return None

    def after_block(self, index: int, x: Tensor, alpha: float) -> Tensor:
        return x

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}"
