"""DINOv3's RoPE (Siméoni et al. 2025; timm's ``RotaryEmbeddingDinoV3``, transformers' ``DINOv3ViTConfig``): axial
rotary angles over *normalised* coordinates, with the coordinates augmented in training.

A slot's (row, column) is its patch centre scaled into ``[-1, 1]``: ``2 (i + 0.5) / H − 1`` (timm's ``centered``
grid, ``normalize_coords="separate"``). With ``hd/4`` periods ``base^(2j / (hd/2))`` (``base`` 100), the angles are
``2π · coordinate / period``: the first ``hd/4`` angles are the row's, the next ``hd/4`` the column's, and channel
``j`` pairs with ``j + hd/2`` (timm's ``rotate_half`` layout; one group of :class:`~peanchor.pe.base.RotaryTables`).

In training only (the PE module's ``training`` flag), each forward pass draws one transform of all coordinates, in
DINOv3's order: a shift ``U(−s, s)`` per axis, a jitter ``exp(U(−log J, log J))`` per axis, a rescale
``exp(U(−log R, log R))`` shared by both axes. Defaults: DINOv3's (no shift, no jitter, rescale 2). In evaluation
the coordinates are the grid's, so evaluation is deterministic. α scales every angle.

Imports: torch; :mod:`peanchor.pe` (base, declaration, registry).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from peanchor.pe.base import PEContext, PositionalEncoding, RotaryTables
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class DinoV3RoPE(PositionalEncoding):
    """Axial RoPE over coordinates normalised to ``[-1, 1]``; shift, jitter and rescale of them in training."""

    name = "rope_dinov3"

    anchoring = "relative offsets between slots, by construction, in units of the image (normalised coordinates)"
    scalable = True
    has_rotary = True
    declares = PEDeclaration(
        kinds=("rotary",), layout="half", prefix="none", relative=True, alpha="the rotation angles",
        pe_zero="the rotation (angles 0)", params=(("axes", "dinov3"), ("base", 100.0)), other_grids="interpolate",
    )  # fmt: skip

    def __init__(
        self, ctx: PEContext, base: float = 100.0, shift: float | None = None, jitter: float | None = None,
        rescale: float | None = 2.0,
    ) -> None:  # fmt: skip
        super().__init__(ctx)
        hd = ctx.head_dim
        if hd % 4:
            raise ValueError(f"rope_dinov3 needs a head dim divisible by 4, got {hd}")
        for label, value, low in (("shift", shift, 0.0), ("jitter", jitter, 1.0), ("rescale", rescale, 1.0)):
            if value is not None and not (math.isfinite(value) and value >= low):
                raise ValueError(f"rope_dinov3 {label} must be a number >= {low:g} or None, got {value!r}")
        self.base, self.shift, self.jitter, self.rescale = base, shift, jitter, rescale
        quarter = hd // 4
        self.register_buffer("periods", base ** (2.0 * torch.arange(quarter, dtype=torch.float32) / (hd // 2)),
                             persistent=False)  # (hd/4,)  # fmt: skip
        rows, cols = ctx.positions()
        self.register_buffer("coords", self._normalised(rows.double(), cols.double()), persistent=False)  # (N, 2)

    def _normalised(self, rows: Tensor, cols: Tensor) -> Tensor:
        """Slot coordinates in patches ``(N,)`` each → ``(N, 2)`` (row, column) in ``[-1, 1]`` of the trained grid."""
        h, w = self.ctx.grid
        return torch.stack((2 * (rows + 0.5) / h - 1, 2 * (cols + 0.5) / w - 1), dim=1).float()

    def augmented(self, coords: Tensor) -> Tensor:
        """``coords`` ``(N, 2)`` under one draw of DINOv3's training transform (the identity in evaluation)."""
        if not self.training:
            return coords
        if self.shift is not None:
            coords = coords + torch.empty(2).uniform_(-self.shift, self.shift).to(coords)  # one shift per axis
        if self.jitter is not None:
            span = math.log(self.jitter)
            coords = coords * torch.empty(2).uniform_(-span, span).exp().to(coords)  # one factor per axis
        if self.rescale is not None:
            span = math.log(self.rescale)
            coords = coords * torch.empty(1).uniform_(-span, span).exp().to(coords)  # one factor for both
        return coords

    def rotary(self, alpha: float) -> RotaryTables:
        return self._tables(self.augmented(self.coords), alpha)

    def rotary_at(self, alpha: float, rows: Tensor, cols: Tensor) -> RotaryTables:
        return self._tables(self._normalised(rows.double(), cols.double()).to(self.coords.device), alpha)

    def _tables(self, coords: Tensor, alpha: float) -> RotaryTables:
        angles = 2 * math.pi * coords[:, :, None] / self.periods  # (N, 2, hd/4)
        a = alpha * torch.cat((angles.flatten(1), angles.flatten(1)), dim=1)  # (N, hd): row angles, column angles, ×2
        return RotaryTables(a.cos()[None, None], a.sin()[None, None], groups=1)  # (1, 1, N, hd)

    def extra_repr(self) -> str:
        return (f"grid={self.ctx.grid}, base={self.base:g}, shift={self.shift}, jitter={self.jitter}, "
                f"rescale={self.rescale}")  # fmt: skip
