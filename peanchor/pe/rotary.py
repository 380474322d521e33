"""Rotary positional encodings on q and k: axial 2D RoPE and RoPE-Mixed (Heo et al. 2024).

Only patch tokens are rotated; CLS is left alone. ``alpha`` scales every rotation angle, which
interpolates towards no rotation at 0 (our extension: the paper does not scale RoPE).

Imports: torch; :mod:`peanchor.pe.base`, :mod:`peanchor.pe.registry`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding, RotaryTables
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class AxialRoPE(PositionalEncoding):
    """Axial 2D RoPE as in the paper: the head is split into quarters of ``hd/4`` channels.

    Quarters 1–2 rotate as pairs ``(j, j + hd/4)`` by ``x·f_j``; quarters 3–4 likewise by ``y·f_j``,
    with ``f_j = theta^(-j / (hd/4))``, x the column and y the row on the integer grid.
    """

    name = "rope"
    declares = PEDeclaration(kinds=("rotary",), layout="half", relative=True, alpha="the rotation angles",
                             pe_zero="the rotation (angles 0)", params=(("axes", "axial"), ("theta", 10000.0)))  # fmt: skip

    anchoring = "relative offsets between slots, by construction (q·k depends on index differences)"
    scalable = True
    has_rotary = True

    def __init__(self, ctx: PEContext, theta: float = 10000.0) -> None:
        super().__init__(ctx)
        hd = ctx.head_dim
        if hd % 4:
            raise ValueError(f"axial RoPE needs a head dim divisible by 4, got {hd}")
        self.theta = theta
        y, x = ctx.positions()
        self.register_buffer("angles", self._angles(y, x), persistent=False)  # (N, hd)

    def _angles(self, rows: Tensor, cols: Tensor) -> Tensor:
        """Angles ``(N, hd)`` in the rotate-half layout for slot coordinates ``(N,)`` each."""
        quarter = self.ctx.head_dim // 4
        freqs = self.theta ** (-torch.arange(quarter, dtype=torch.float64) / quarter)  # (hd/4,)
        ax, ay = cols[:, None].double() * freqs, rows[:, None].double() * freqs  # (N, hd/4)
        return torch.cat((ax, ax, ay, ay), dim=1).float()  # (N, hd)

    def rotary(self, alpha: float) -> RotaryTables:
        return self._tables(self.angles, alpha)

    def rotary_at(self, alpha: float, rows: Tensor, cols: Tensor) -> RotaryTables:
        return self._tables(self._angles(rows, cols).to(self.angles.device), alpha)

    @staticmethod
    def _tables(angles: Tensor, alpha: float) -> RotaryTables:
        a = angles * alpha  # (N, hd)
        return RotaryTables(a.cos()[None, None], a.sin()[None, None], groups=2)  # (1, 1, N, hd)

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, theta={self.theta:g}"


@PE_REGISTRY.register
class MixedRoPE(PositionalEncoding):
    """RoPE-Mixed: learnable 2D frequencies per layer and head, angle ``x·fx + y·fy``.

    Following Heo et al. 2024, each head starts from magnitudes ``theta^(-4k/hd)`` along two
    orthogonal directions at a random orientation, so heads can learn diagonal and mixed-axis
    frequencies. Pairs are ``(j, j + hd/2)``.
    """

    name = "rope_mixed"
    declares = PEDeclaration(kinds=("rotary",), layout="half", relative=True, alpha="the rotation angles",
                             pe_zero="the rotation (angles 0)", params=(("axes", "mixed"),))  # fmt: skip

    anchoring = "relative offsets between slots, by construction (learned 2D frequencies)"
    scalable = True
    has_rotary = True

    def __init__(self, ctx: PEContext, theta: float = 10.0) -> None:
        super().__init__(ctx)
        hd, heads = ctx.head_dim, ctx.num_heads
        if hd % 4:
            raise ValueError(f"RoPE-Mixed needs a head dim divisible by 4, got {hd}")
        self.theta = theta
        mag = theta ** (-torch.arange(0, hd, 4, dtype=torch.float32) / hd)  # (hd/4,)
        phi = torch.rand(ctx.depth, heads, 1) * 2 * math.pi  # (L, H, 1): one orientation per head
        fx = torch.cat((mag * phi.cos(), mag * (phi + math.pi / 2).cos()), dim=-1)  # (L, H, hd/2)
        fy = torch.cat((mag * phi.sin(), mag * (phi + math.pi / 2).sin()), dim=-1)  # (L, H, hd/2)
        self.freqs = nn.Parameter(torch.stack((fx, fy), dim=0))  # (2, L, H, hd/2)
        y, x = ctx.positions()
        self.register_buffer("xy", torch.stack((x, y)).float(), persistent=False)  # (2, N)

    def rotary(self, alpha: float) -> RotaryTables:
        return self._tables(self.xy[0], self.xy[1], alpha)

    def rotary_at(self, alpha: float, rows: Tensor, cols: Tensor) -> RotaryTables:
        return self._tables(cols.to(self.xy), rows.to(self.xy), alpha)

    def _tables(self, x: Tensor, y: Tensor, alpha: float) -> RotaryTables:
        fx, fy = self.freqs[0], self.freqs[1]  # (L, H, hd/2); x, y: (N,)
        a = alpha * (x[None, None, :, None] * fx[:, :, None] + y[None, None, :, None] * fy[:, :, None])
        a = torch.cat((a, a), dim=-1)  # (L, H, N, hd)
        return RotaryTables(a.cos(), a.sin(), groups=1)

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, theta={self.theta:g}"
