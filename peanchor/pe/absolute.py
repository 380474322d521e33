"""Absolute positional encodings added to the token sequence: learned (APE) and 2D sin-cos (SPE).

Imports: torch; :mod:`peanchor.pe.base`, :mod:`peanchor.pe.registry`.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class LearnedAbsolutePE(PositionalEncoding):
    """A learned table with one row per slot, CLS included, added after the CLS concat.

    The paper initialises it N(0, 1) (``init_std=1.0``). The init size decides how strongly and how
    early it anchors tokens to indices: timm's 0.02 starts almost position-free.
    """

    name = "ape"
    declares = PEDeclaration(kinds=("absolute",), layout="table", prefix="own", alpha="the table, CLS row included",
                             pe_zero="the table (every row)")  # fmt: skip

    anchoring = "indices, by construction; geometry only once training makes the table smooth"
    scalable = True
    has_table = True

    def __init__(self, ctx: PEContext, init_std: float = 1.0) -> None:
        super().__init__(ctx)
        self.init_std = init_std
        self.table = nn.Parameter(torch.randn(1, ctx.num_prefix + ctx.num_patches, ctx.embed_dim) * init_std)

    def add(self, x: Tensor, alpha: float) -> Tensor:
        return x + alpha * self.table  # (B, P + N, D); alpha scales the CLS row too, as in the paper

    def table_rows(self, alpha: float) -> tuple[Tensor | None, Tensor]:
        table = alpha * self.table  # (1, P + N, D)
        p = self.ctx.num_prefix
        return table[:, :p], table[:, p:]

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, init_std={self.init_std}"


def sincos_2d(grid: tuple[int, int], dim: int, temperature: float = 10000.0) -> Tensor:
    """The paper's fixed 2D code ``(N, dim)``: ``[sin(xω), cos(xω), sin(yω), cos(yω)]``.

    ``ω_k = temperature^(-k / (dim/4))`` for ``k = 0 .. dim/4 - 1``; x is the column, y the row, and
    slots are row-major.

    >>> pe = sincos_2d((2, 3), 8)
    >>> pe.shape
    torch.Size([6, 8])
    >>> pe[0].tolist()  # slot (row 0, col 0): sin 0 = 0, cos 0 = 1
    [0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0, 1.0]
    """
    if dim % 4:
        raise ValueError(f"the 2D sin-cos PE needs embed_dim divisible by 4, got {dim}")
    rows, cols = grid
    quarter = dim // 4
    omega = temperature ** (-torch.arange(quarter, dtype=torch.float64) / quarter)  # (dim/4,)
    idx = torch.arange(rows * cols)
    y, x = (idx // cols).double(), (idx % cols).double()
    ax, ay = x[:, None] * omega, y[:, None] * omega  # (N, dim/4)
    return torch.cat((ax.sin(), ax.cos(), ay.sin(), ay.cos()), dim=1).float()  # (N, dim)


@PE_REGISTRY.register
class SinCos2DPE(PositionalEncoding):
    """Fixed 2D sin-cos code on the patch tokens (the paper's SPE).

    The paper does not say what the CLS slot gets. ``cls="zero"`` (our default) adds nothing to CLS;
    ``cls="learned"`` adds a learned vector, zero-initialised.
    """

    name = "sincos"
    declares = PEDeclaration(kinds=("absolute",), layout="function", prefix="zero", alpha="the code (and CLS's "
                             "learned vector with cls='learned')", pe_zero="the code (and CLS's vector)",
                             params=(("temperature", 10000.0),))  # fmt: skip

    anchoring = "indices and grid geometry, by construction (a fixed smooth code)"
    scalable = True
    has_table = True

    def __init__(
        self, ctx: PEContext, cls: Literal["zero", "learned"] = "zero", temperature: float = 10000.0
    ) -> None:
        super().__init__(ctx)
        if cls not in ("zero", "learned"):
            raise ValueError(f"sincos cls must be 'zero' or 'learned', got {cls!r}")
        self.cls_mode = cls
        self.temperature = temperature
        self.register_buffer("table", sincos_2d(ctx.grid, ctx.embed_dim, temperature), persistent=False)
        if cls == "learned":
            self.cls_pe = nn.Parameter(torch.zeros(1, ctx.num_prefix, ctx.embed_dim))

    def add(self, x: Tensor, alpha: float) -> Tensor:
        p = self.ctx.num_prefix
        prefix = x[:, :p] + alpha * self.cls_pe if self.cls_mode == "learned" else x[:, :p]
        return torch.cat((prefix, x[:, p:] + alpha * self.table), dim=1)  # (B, P + N, D)

    def table_rows(self, alpha: float) -> tuple[Tensor | None, Tensor]:
        prefix = alpha * self.cls_pe if self.cls_mode == "learned" else None  # (1, P, D): CLS gets nothing by default
        return prefix, (alpha * self.table)[None]  # (1, N, D)

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, cls={self.cls_mode!r}, temperature={self.temperature:g}"


