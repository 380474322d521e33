"""RoPE + APE (Heo et al. 2024, "Rotary Position Embedding for Vision Transformer"; timm's
``vit_*_rope_mixed_ape_224`` and ``vit_*_rope_ape_224``): a learned absolute table added to the tokens *and* a
rotary encoding of q and k.

The table has one row per slot, CLS included (timm's EVA ``pos_embed`` with the class token), initialised
trunc-normal(std ``init_std``; timm 0.02). The rotation is RoPE-Mixed (``rope="mixed"``, the default, learned 2D
frequencies per block and head, :class:`peanchor.pe.rotary.MixedRoPE`) or axial RoPE (``rope="axial"``,
:class:`peanchor.pe.rotary.AxialRoPE`). α scales both the table and every angle; ``pe_zero`` zeroes the table
(``pe.table``) and makes the rotation the identity (``rope.tables``).

The logit is not relative: the table makes the tokens themselves carry absolute position.

Imports: torch; :mod:`peanchor.pe` (base, declaration, registry, rotary).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding, RotaryTables
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY
from peanchor.pe.rotary import AxialRoPE, MixedRoPE

ROTATIONS = {"mixed": MixedRoPE, "axial": AxialRoPE}


@PE_REGISTRY.register
class RoPEWithAPE(PositionalEncoding):
    """A learned table (``(1, P + N, D)``, CLS row included) plus RoPE-Mixed or axial RoPE on q and k."""

    name = "rope_ape"

    anchoring = "slot indices through the table, and relative offsets through the rotation"
    scalable = True
    has_table = True
    has_rotary = True
    declares = PEDeclaration(
        kinds=("absolute", "rotary"), layout="half", prefix="own", relative=False,
        alpha="the table and the rotation angles", pe_zero="the table (zeroed) and the rotation (angles 0)",
        params=(("axes", "mixed"),),  # the default; the "rope" option says which the model was built with
    )  # fmt: skip

    def __init__(self, ctx: PEContext, rope: str = "mixed", init_std: float = 0.02, theta: float | None = None) -> None:
        super().__init__(ctx)
        if rope not in ROTATIONS:
            raise ValueError(f"rope_ape rope must be one of {', '.join(ROTATIONS)}, got {rope!r}")
        self.rope_kind, self.init_std = rope, init_std
        self.table = nn.Parameter(
            nn.init.trunc_normal_(torch.empty(1, ctx.num_prefix + ctx.num_patches, ctx.embed_dim), std=init_std)
        )
        self.rope = ROTATIONS[rope](ctx) if theta is None else ROTATIONS[rope](ctx, theta=theta)

    def add(self, x: Tensor, alpha: float) -> Tensor:
        return x + alpha * self.table  # (B, P + N, D); the CLS row too

    def table_rows(self, alpha: float) -> tuple[Tensor | None, Tensor]:
        table = alpha * self.table  # (1, P + N, D)
        p = self.ctx.num_prefix
        return table[:, :p], table[:, p:]

    def rotary(self, alpha: float) -> RotaryTables:
        return self.rope.rotary(alpha)

    def rotary_at(self, alpha: float, rows: Tensor, cols: Tensor) -> RotaryTables:
        return self.rope.rotary_at(alpha, rows, cols)

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, rope={self.rope_kind!r}, init_std={self.init_std}"
