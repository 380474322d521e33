"""Learnable Fourier features (Li et al., NeurIPS 2021, "Learnable Fourier Features for Multi-Dimensional Spatial
Positional Encoding"): a 2D position ``x`` becomes ``MLP([cos(x W_rᵀ), sin(x W_rᵀ)] / √F)`` with ``W_r`` learned.

Their equations (2) and (3): ``r_x = (1/√F) [cos(x W_rᵀ) ‖ sin(x W_rᵀ)]`` with ``W_r ∈ R^{F/2 × 2}`` initialised
``N(0, γ⁻²)``, then ``PE_x = GELU(r_x W_1 + B_1) W_2 + B_2`` (one hidden layer). ``x`` is the slot's (row, column) on
the integer patch grid. The code is added to the patch tokens (the prefix tokens get none), α scaling it, and it is
the hook point ``pe.table`` (``pe_zero`` zeroes it; ``pe_resample`` resamples the code as a table).

timm's ``FourierEmbed`` is another PE by the same name: fixed (not learned) pixel frequency bands, concatenated to
the channels rather than passed through an MLP and added (Perceiver's); docs/families.md says so.

Imports: torch; :mod:`peanchor.pe` (base, declaration, registry).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class LearnableFourierPE(PositionalEncoding):
    """``features`` Fourier features (``features/2`` learned 2D frequencies, cos and sin), an MLP of ``hidden``
    GELU units to ``embed_dim``; ``gamma`` sets the frequencies' init ``N(0, γ⁻²)``."""

    name = "fourier"

    anchoring = "slot positions through a learned smooth function of (row, column); geometry by construction"
    scalable = True
    has_table = True
    declares = PEDeclaration(
        kinds=("absolute",), layout="function", prefix="none", relative=False,
        alpha="the code added to the patch tokens", pe_zero="the Fourier code (zeroed)",
    )  # fmt: skip

    def __init__(self, ctx: PEContext, features: int = 64, hidden: int | None = None, gamma: float = 1.0) -> None:
        super().__init__(ctx)
        if features < 2 or features % 2:
            raise ValueError(f"fourier features must be a positive even number, got {features}")
        if gamma <= 0:
            raise ValueError(f"fourier gamma must be > 0, got {gamma}")
        self.features, self.gamma = features, gamma
        self.hidden = hidden or ctx.embed_dim
        self.freqs = nn.Parameter(torch.randn(features // 2, 2) / gamma)  # W_r (F/2, 2)
        self.mlp = nn.Sequential(nn.Linear(features, self.hidden), nn.GELU(), nn.Linear(self.hidden, ctx.embed_dim))
        rows, cols = ctx.positions()
        self.register_buffer("xy", torch.stack((rows, cols), dim=1).float(), persistent=False)  # (N, 2)

    def code_at(self, xy: Tensor) -> Tensor:
        """The code ``(N, D)`` at positions ``xy`` ``(N, 2)`` (row, column)."""
        w = self.freqs  # (F/2, 2)
        angle = xy[:, :1] * w[:, 0] + xy[:, 1:] * w[:, 1]  # (N, F/2): x W_rᵀ, written out for the 2 coordinates
        r = torch.cat((angle.cos(), angle.sin()), dim=1) / math.sqrt(self.features)  # (N, F)
        return self.mlp(r)  # (N, D)

    def add(self, x: Tensor, alpha: float) -> Tensor:
        p = self.ctx.num_prefix
        return torch.cat((x[:, :p], x[:, p:] + alpha * self.code_at(self.xy)), dim=1)  # (B, P + N, D)

    def table_rows(self, alpha: float) -> tuple[Tensor | None, Tensor]:
        return None, (alpha * self.code_at(self.xy))[None]  # (1, N, D); the prefix gets nothing

    def macs(self, images: int) -> int:
        # The MLP runs once per pass, whatever the batch.
        return self.ctx.num_patches * (self.features * self.hidden + self.hidden * self.ctx.embed_dim)

    def extra_repr(self) -> str:
        return f"grid={self.ctx.grid}, features={self.features}, hidden={self.hidden}, gamma={self.gamma:g}"
