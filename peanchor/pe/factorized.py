"""Factorized absolute position tables (NaViT; timm NaFlexViT's ``pos_embed="factorized"``, the PE of SigLIP2
NaFlex): one learned table of rows and one of columns, the code of slot ``(r, c)`` being ``row[r] + col[c]``.

It holds ``(H + W) · D`` parameters instead of ``H · W · D``. As in timm's NaFlexViT, the prefix tokens get no code.
Both tables start trunc-normal with std ``init_std`` (timm: 0.02). α scales the whole code. The code is the hook
point ``pe.table`` (``pe_zero`` zeroes it; ``pe_resample`` resamples it as a full table).

Imports: torch; :mod:`peanchor.pe` (base, declaration, registry).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class FactorizedPE(PositionalEncoding):
    """Learned ``row (1, H, D)`` and ``col (1, W, D)`` tables; slot ``(r, c)`` gets ``row[r] + col[c]``."""

    name = "factorized"

    anchoring = "slot rows and columns, by construction (one learned code per row plus one per column)"
    scalable = True
    has_table = True
    declares = PEDeclaration(
        kinds=("absolute",), layout="factorized", prefix="none", relative=False,
        alpha="the code added to the patch tokens", pe_zero="the row and column code (zeroed)",
    )  # fmt: skip

    def __init__(self, ctx: PEContext, init_std: float = 0.02) -> None:
        super().__init__(ctx)
        rows, cols = ctx.grid
        self.init_std = init_std
        self.row = nn.Parameter(nn.init.trunc_normal_(torch.empty(1, rows, ctx.embed_dim), std=init_std))
        self.col = nn.Parameter(nn.init.trunc_normal_(torch.empty(1, cols, ctx.embed_dim), std=init_std))

    def code(self) -> Tensor:
        """The patch code ``(1, N, D)``, row-major."""
        return (self.row[:, :, None] + self.col[:, None, :]).flatten(1, 2)  # (1, H·W, D)

    def add(self, x: Tensor, alpha: float) -> Tensor:
        p = self.ctx.num_prefix
        return torch.cat((x[:, :p], x[:, p:] + alpha * self.code()), dim=1)  # (B, P + N, D)

    def table_rows(self, alpha: float) -> tuple[Tensor | None, Tensor]:
        return None, alpha * self.code()  # the prefix gets nothing

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, init_std={self.init_std}"
