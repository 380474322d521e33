"""ComRoPE (Yu et al., arXiv 2506.03737, "ComRoPE: Scalable and Robust Rotary Position Embedding Parameterized by
Trainable Commuting Angle Matrices"), its axis-partition form ComRoPE-AP.

``R(p) = exp(Σ_k p_k A_k)`` with trainable skew-symmetric ``A_k`` that commute: the head's channels are cut into
blocks of ``block`` channels and block ``j`` belongs to one axis only (rows for even ``j``, columns for odd), so
``A_row`` and ``A_col`` live on disjoint blocks and ``R(p)`` is block-diagonal with blocks ``exp(p_axis(j) B_j)``.
Because they commute, ``R(p)ᵀ R(q) = R(q − p)``: the logit depends only on the offset (the paper's RoPE equation,
tested). Every block and head has its own ``B_j = S_j − S_jᵀ``, ``S_j`` initialised ``N(0, init_std²)`` (default
``1 / block``); ``p`` is the slot's (row, column) on the integer grid. Applied as a
:class:`~peanchor.pe.base.BlockRotation` (the hook point ``pe.rotation``; ``pe_zero`` drops it); CLS is not
rotated. α scales the angle matrices (the identity at 0).

Imports: torch; :mod:`peanchor.pe` (base, declaration, lie, registry).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe.base import BlockRotation, PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.lie import skew
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class ComRoPE(PositionalEncoding):
    """ComRoPE-AP: trainable angle blocks ``(L, H, nb, b, b)``, block ``j`` turned by the row (even ``j``) or the
    column (odd ``j``) coordinate."""

    name = "comrope"

    anchoring = "relative offsets between slots, by construction (commuting learned rotations)"
    scalable = True
    has_rotation = True
    declares = PEDeclaration(
        kinds=("rotary",), layout="matrix", prefix="none", relative=True, alpha="the angle matrices",
        pe_zero="the rotation (the identity)", params=(("variant", "AP"),),
    )  # fmt: skip

    def __init__(self, ctx: PEContext, block: int = 8, init_std: float | None = None) -> None:
        super().__init__(ctx)
        hd = ctx.head_dim
        if block < 2 or hd % block or hd // block < 2:
            raise ValueError(f"comrope block must be >= 2 and divide the head dim {hd} into >= 2 blocks, got {block}")
        self.block = block
        self.init_std = init_std if init_std is not None else 1.0 / block
        nb = hd // block
        self.raw = nn.Parameter(torch.randn(ctx.depth, ctx.num_heads, nb, block, block) * self.init_std)
        self.register_buffer("block_coords", self._block_coords(*ctx.positions()), persistent=False)  # (N, nb)

    def _block_coords(self, rows: Tensor, cols: Tensor) -> Tensor:
        """Each block's coordinate ``(N, nb)``: the row for even blocks, the column for odd ones."""
        axis = torch.arange(self.ctx.head_dim // self.block) % 2  # 0: the row, 1: the column
        return torch.stack((rows, cols), dim=1).float()[:, axis]

    def angle_blocks(self) -> Tensor:
        """The skew-symmetric blocks ``(L, H, nb, b, b)``."""
        return skew(self.raw)

    def rotation(self, alpha: float) -> BlockRotation | None:
        return self._rotation(self.block_coords, alpha)

    def rotation_at(self, alpha: float, rows: Tensor, cols: Tensor) -> BlockRotation | None:
        return self._rotation(self._block_coords(rows, cols).to(self.block_coords), alpha)

    def _rotation(self, block_coords: Tensor, alpha: float) -> BlockRotation | None:
        if alpha == 0:
            return None  # the identity, exactly
        blocks = self.angle_blocks()[:, :, None]  # (L, H, 1, nb, b, b)
        algebra = alpha * blocks * block_coords[:, :, None, None]  # (L, H, N, nb, b, b)
        return BlockRotation(torch.linalg.matrix_exp(algebra))

    def macs(self, images: int) -> int:
        c = self.ctx
        return 2 * c.depth * images * c.num_heads * c.num_patches * c.head_dim * self.block

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, block={self.block}, init_std={self.init_std:g}"
