"""LieRE (Ostmeier et al., arXiv 2406.10322, "LieRE: Lie Rotational Positional Encodings"): q and k of a patch at
position ``p`` are rotated by ``R(p) = exp(Σ_k p_k A_k)`` with learned skew-symmetric generators ``A_k``.

Here ``p`` is the slot's (row, column) on the integer patch grid, and every block and head has its own two
generators, block-diagonal with ``head_dim / block`` blocks of ``block`` channels (``block = head_dim``, the
default, is the paper's dense LieRE; a smaller block is cheaper). A generator is ``S − Sᵀ`` with ``S`` learned,
initialised ``N(0, init_std²)`` (default ``1 / block``). The rotation matrices are exponentiated once per position
and block in every forward pass (``torch.linalg.matrix_exp``), never per pair of tokens, and applied to q and k as a
:class:`~peanchor.pe.base.BlockRotation` (the hook point ``pe.rotation``, where ``pe_zero`` drops it). CLS is not
rotated. α scales the generators: ``R_α(p) = exp(α Σ_k p_k A_k)``, the identity at 0.

LieRE is **not** relative in general: ``R(p)ᵀ R(q) = exp(−Σ p_k A_k) exp(Σ q_k A_k)`` equals ``R(q − p)`` only when
the generators commute. What it does promise (tested): ``R(0) = I``, ``R(p)`` orthogonal, ``R(p) R(−p) = I``, and
relative logits when the generators commute.

Imports: torch; :mod:`peanchor.pe` (base, declaration, lie, registry).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe.base import BlockRotation, PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.lie import exp_rotations, skew
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class LieRE(PositionalEncoding):
    """Learned generators ``(L, H, 2, head_dim/block, block, block)``; rotation ``exp(row·A_row + col·A_col)``."""

    name = "liere"

    anchoring = "slot positions through learned rotations; relative only where the generators commute"
    scalable = True
    has_rotation = True
    declares = PEDeclaration(
        kinds=("rotary",), layout="matrix", prefix="none", relative=False, alpha="the generators",
        pe_zero="the rotation (the identity)",
    )  # fmt: skip

    def __init__(self, ctx: PEContext, block: int | None = None, init_std: float | None = None) -> None:
        super().__init__(ctx)
        hd = ctx.head_dim
        self.block = block or hd
        if self.block < 2 or hd % self.block:
            raise ValueError(f"liere block must be >= 2 and divide the head dim {hd}, got {self.block}")
        self.init_std = init_std if init_std is not None else 1.0 / self.block
        nb = hd // self.block
        self.raw = nn.Parameter(torch.randn(ctx.depth, ctx.num_heads, 2, nb, self.block, self.block) * self.init_std)
        rows, cols = ctx.positions()
        self.register_buffer("coords", torch.stack((rows, cols), dim=1).float(), persistent=False)  # (N, 2)

    def generators(self) -> Tensor:
        """The skew-symmetric generators ``(L, H, 2, nb, b, b)``: row axis first, then column."""
        return skew(self.raw)

    def rotation(self, alpha: float) -> BlockRotation | None:
        if alpha == 0:
            return None  # the identity, exactly
        return BlockRotation(exp_rotations(self.generators(), self.coords, alpha))  # (L, H, N, nb, b, b)

    def rotation_at(self, alpha: float, rows: Tensor, cols: Tensor) -> BlockRotation | None:
        if alpha == 0:
            return None
        coords = torch.stack((rows, cols), dim=1).to(self.coords)  # (N', 2)
        return BlockRotation(exp_rotations(self.generators(), coords, alpha))

    def macs(self, images: int) -> int:
        c = self.ctx
        return 2 * c.depth * images * c.num_heads * c.num_patches * c.head_dim * self.block  # q and k, every block

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, block={self.block}, init_std={self.init_std:g}"
