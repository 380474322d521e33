"""STRING (Schenck et al., arXiv 2502.02562, "Learning the RoPEs: Better 2D and 3D Position Encodings with STRING"),
its Cayley form: RoPE after a learned orthogonal matrix, ``q ↦ R_RoPE(p) P q`` with ``P = Cayley(S)``.

``P = (I − S)(I + S)⁻¹`` with ``S`` skew-symmetric, learned per block and head and initialised to 0 (so a fresh
STRING is RoPE-Mixed). ``R_RoPE(p)`` is RoPE-Mixed's rotation (:class:`peanchor.pe.rotary.MixedRoPE`: learned 2D
frequencies per block and head, pairs ``(j, j + hd/2)``). Since ``P`` is the same at every position,
``(R(p) P q)ᵀ (R(m) P k) = qᵀ Pᵀ R(m − p) P k``: the logit depends only on the offset (tested). The product
``R(p) P`` is one dense ``hd × hd`` rotation per position and head, applied as a
:class:`~peanchor.pe.base.BlockRotation` (the hook point ``pe.rotation``, where ``pe_zero`` drops it); CLS is not
rotated. α scales both the RoPE angles and ``S`` (``P = Cayley(α S)``), so α = 0 is the identity, as ``pe_zero``.

Imports: torch; :mod:`peanchor.pe` (base, declaration, lie, registry, rotary).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe.base import BlockRotation, PEContext, PositionalEncoding, RotaryTables
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.lie import cayley, skew
from peanchor.pe.registry import PE_REGISTRY
from peanchor.pe.rotary import MixedRoPE


@PE_REGISTRY.register
class CayleySTRING(PositionalEncoding):
    """RoPE-Mixed after ``P = Cayley(S)``, ``S`` ``(L, H, hd, hd)`` skew-symmetric and learned."""

    name = "string"

    anchoring = "relative offsets between slots, by construction (RoPE in a learned orthogonal basis)"
    scalable = True
    has_rotation = True
    declares = PEDeclaration(
        kinds=("rotary",), layout="matrix", prefix="none", relative=True,
        alpha="the RoPE angles and the Cayley generator", pe_zero="the rotation (the identity)",
        params=(("variant", "Cayley"),),
    )  # fmt: skip

    def __init__(self, ctx: PEContext, theta: float = 10.0) -> None:
        super().__init__(ctx)
        hd = ctx.head_dim
        self.rope = MixedRoPE(ctx, theta=theta)
        self.raw = nn.Parameter(torch.zeros(ctx.depth, ctx.num_heads, hd, hd))

    def basis(self, alpha: float) -> Tensor:
        """``P = Cayley(α S)`` ``(L, H, hd, hd)``."""
        return cayley(alpha * skew(self.raw))

    def rotation(self, alpha: float) -> BlockRotation | None:
        return None if alpha == 0 else self._rotation(self.rope.rotary(alpha), alpha)  # α = 0: the identity, exactly

    def rotation_at(self, alpha: float, rows: Tensor, cols: Tensor) -> BlockRotation | None:
        return None if alpha == 0 else self._rotation(self.rope.rotary_at(alpha, rows, cols), alpha)

    def _rotation(self, tables: RotaryTables, alpha: float) -> BlockRotation:
        """``R(p) P`` from RoPE-Mixed's ``tables`` (cos, sin ``(L, H, N, hd)``) and ``P = Cayley(α S)``."""
        cos, sin = tables._signed(0)
        columns = self.basis(alpha).mT[:, :, None]  # (L, H, 1, hd, hd): row j is P's column j
        half = columns.shape[-1] // 2
        swapped = columns.unflatten(-1, (1, 2, half)).flip(-2).flatten(-3)  # (b, a) per rotate-half pair
        turned = columns * cos[:, :, :, None] + swapped * sin[:, :, :, None]  # (L, H, N, hd, hd): row j is R(p) P e_j
        return BlockRotation(turned.mT[:, :, :, None])  # (L, H, N, 1, hd, hd): R(p) P

    def macs(self, images: int) -> int:
        c = self.ctx
        return 2 * c.depth * images * c.num_heads * c.num_patches * c.head_dim * c.head_dim

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, theta={self.rope.theta:g}"
