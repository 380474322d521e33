"""``rowcol``: a learned row embedding plus a learned column embedding, added to the patch tokens (a factorised
absolute PE with ``rows + cols`` vectors instead of ``rows · cols``); CLS gets nothing. α scales it.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe import PE_REGISTRY, PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration


@PE_REGISTRY.register
class RowColumnPE(PositionalEncoding):
    """``x[patch (r, c)] += α (row[r] + col[c])``; both tables start at ``N(0, init_std²)``."""

    name = "rowcol"
    declares = PEDeclaration(kinds=("absolute",), layout="factorized", prefix="none", alpha="the row and column tables",
                             pe_zero="the row and column tables")  # fmt: skip
    anchoring = "rows and columns separately, by construction; the grid's geometry only if training makes them smooth"
    scalable = True
    any_grid = False  # its tables have the trained grid's rows and columns

    def __init__(self, ctx: PEContext, init_std: float = 0.02) -> None:
        super().__init__(ctx)
        rows, cols = ctx.grid
        self.init_std = init_std
        self.row = nn.Parameter(torch.randn(rows, ctx.embed_dim) * init_std)  # (rows, D)
        self.col = nn.Parameter(torch.randn(cols, ctx.embed_dim) * init_std)  # (cols, D)

    def add(self, x: Tensor, alpha: float) -> Tensor:
        table = (self.row[:, None, :] + self.col[None, :, :]).flatten(0, 1)  # (N, D), row-major as the slots
        prefix, patches = x[:, : self.ctx.num_prefix], x[:, self.ctx.num_prefix :]
        return torch.cat((prefix, patches + alpha * table), dim=1)  # (B, P + N, D)

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, init_std={self.init_std}"
