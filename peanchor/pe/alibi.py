"""2D ALiBi (CROMA, Fuller et al. 2023): a fixed per-head attention bias ``−slope_h · ‖p_i − p_j‖``.

Every pair of patch slots gets the Euclidean distance of their (row, column) grid positions, in patches, times a
per-head slope; the slopes are geometric, ``slope_h = 2^(−8 h / H)`` for heads ``h = 1 .. H`` (Press et al.'s ALiBi
schedule, which CROMA keeps). Nothing is learned. CLS has no grid position: every logit from or to a prefix token
gets a zero bias, so CLS attends by content only and the PE is purely relative.

α is the slope scale: the bias is ``α · (−slope_h · distance)`` (α = 0 removes it exactly). The bias is the hook
point ``pe.bias``, where ``pe_zero`` drops it.

Imports: torch; :mod:`peanchor.pe` (base, declaration, registry).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


def alibi_slopes(num_heads: int) -> Tensor:
    """The geometric slopes ``2^(−8 h / H)``, ``h = 1 .. H``: ``(H,)``.

    >>> alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    """
    heads = torch.arange(1, num_heads + 1, dtype=torch.float64)
    return torch.exp2(-8.0 * heads / num_heads).float()


def distances(rows: Tensor, cols: Tensor) -> Tensor:
    """Euclidean distances ``(N, N)`` between slots at coordinates ``rows``, ``cols`` ``(N,)`` each, in patches."""
    pos = torch.stack((rows, cols), dim=1).double()  # (N, 2)
    return torch.cdist(pos, pos).float()  # (N, N)


@PE_REGISTRY.register
class ALiBi2D(PositionalEncoding):
    """A fixed bias ``−slope_h · ‖p_i − p_j‖`` on the patch-to-patch logits of head ``h``, the same in every block;
    0 on every logit that involves a prefix token."""

    name = "alibi"

    anchoring = "relative distances between slots, by construction (a fixed bias that falls with distance)"
    scalable = True
    has_bias = True
    declares = PEDeclaration(
        kinds=("bias",), layout="distance", prefix="zero", relative=True,
        alpha="the slopes (the whole bias)", pe_zero="the attention bias",
        params=(("slopes", "geometric 2^(-8h/H)"),),
    )  # fmt: skip

    def __init__(self, ctx: PEContext) -> None:
        super().__init__(ctx)
        self.register_buffer("slopes", alibi_slopes(ctx.num_heads), persistent=False)  # (H,)
        self.register_buffer("bias", self._bias(*ctx.positions()), persistent=False)  # (1, H, T, T)

    def _bias(self, rows: Tensor, cols: Tensor) -> Tensor:
        """``(1, H, P + N, P + N)`` for slots at ``rows``, ``cols`` ``(N,)``: zero on the prefix rows and columns."""
        patch = -self.slopes[:, None, None] * distances(rows, cols).to(self.slopes)  # (H, N, N)
        p = self.ctx.num_prefix
        return F.pad(patch, (p, 0, p, 0))[None]

    def attn_bias(self, alpha: float) -> Tensor | None:
        if alpha == 0:
            return None  # no bias at all: exactly the position-free attention
        return alpha * self.bias  # (1, H, T, T)

    def attn_bias_at(self, alpha: float, rows: Tensor, cols: Tensor) -> Tensor | None:
        if alpha == 0:
            return None
        return alpha * self._bias(rows, cols)  # the distance extrapolates: ALiBi's own convention
