"""Conditional positional encodings: a position signal computed from the tokens themselves.

``peg`` is the Positional Encoding Generator of Chu et al. 2021 ("Conditional Positional Encodings
for Vision Transformers", CPVT): a 3×3 depth-wise convolution over the patch-token grid, added
residually to the patch tokens after the first block. It has no table indexed by position. Its
positional signal has two sources:

* **zero padding at the grid border.** A slot on the edge sees zeros where an interior slot sees
  neighbours, so the conv output tells border slots from interior ones. Deeper PEG-fed blocks can
  spread this into absolute position;
* **the slot neighbourhood.** Each slot mixes in the content of the slots next to it on the grid.

Both are properties of *slots*, not of content. Under RPI (``token_perm``) the content is shuffled
across slots before the PEG runs, so the conv mixes content that is adjacent in the *slot* grid and
the border signal stays on the border slots. The structure it induces is anchored to the slot grid,
like a table-based PE, but only through the conv's view of slot neighbours: nothing marks slot
``i`` as ``i`` before block 0, so the first block is permutation-equivariant.

How the PEs in :mod:`peanchor.pe` anchor structure (each class's ``anchoring`` string):

========== =================================================================================
none       nothing (permutation-equivariant on patch tokens)
ape        slot indices by construction (a table row per slot); geometry only once trained
sincos     slot indices and grid geometry by construction (fixed smooth code)
rope*      relative slot offsets by construction (q·k depends on index differences)
relbias    relative slot offsets by construction (a learned bias per (dy, dx))
peg        not by a table: slot neighbourhoods and zero padding at the border, from block 1 on
========== =================================================================================

Imports: torch; :mod:`peanchor.pe.base`, :mod:`peanchor.pe.registry`.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from peanchor.pe.base import PEContext, PositionalEncoding
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY


@PE_REGISTRY.register
class PositionalEncodingGenerator(PositionalEncoding):
    """CPVT's PEG: ``x_patch + alpha * dwconv3x3(x_patch)`` after block ``block`` (default 0, the first).

    The conv is depth-wise (``groups = D``), 3×3, stride 1, zero padding 1, with bias. CLS is left
    alone. ``alpha`` scales the conv's output: at 0 the PEG is removed exactly and the model is a
    ``none`` model with the same other weights. The model's init gives the conv trunc-normal(0.02)
    weights and a zero bias, so a fresh PEG starts as a small perturbation.
    """

    name = "peg"
    declares = PEDeclaration(kinds=("conditional",), alpha="the conv's output",
                             pe_zero="nothing: no edit removes a conv between blocks")  # fmt: skip

    anchoring = (
        "the slot grid, but not by a table: a depth-wise conv over slot neighbours whose zero padding "
        "marks the border; only from the block after the PEG on (the first block is permutation-equivariant)"
    )
    scalable = True
    any_grid = False  # its conv reshapes the tokens to the trained grid

    def __init__(self, ctx: PEContext, block: int = 0, kernel_size: int = 3) -> None:
        super().__init__(ctx)
        if not 0 <= block < ctx.depth:
            raise ValueError(f"peg block must be in 0..{ctx.depth - 1}, got {block}")
        if kernel_size < 1 or kernel_size % 2 == 0:
            raise ValueError(f"peg kernel_size must be a positive odd integer, got {kernel_size}")
        self.block = block
        d = ctx.embed_dim
        # groups=d: each channel is filtered on its own (depth-wise); padding keeps the grid size.
        self.conv = nn.Conv2d(d, d, kernel_size, padding=kernel_size // 2, groups=d, bias=True)

    def after_block(self, index: int, x: Tensor, alpha: float) -> Tensor:
        if index != self.block or alpha == 0:
            return x  # exactly the input: alpha = 0 is the position-free model, bit for bit
        p = self.ctx.num_prefix
        rows, cols = self.ctx.grid
        prefix, patches = x[:, :p], x[:, p:]  # (B, P, D), (B, N, D)
        b, n, d = patches.shape
        grid = patches.transpose(1, 2).reshape(b, d, rows, cols)  # (B, D, H, W), row-major slots
        pos = self.conv(grid).flatten(2).transpose(1, 2)  # (B, N, D)
        return torch.cat((prefix, patches + alpha * pos), dim=1)  # (B, P + N, D)

    def extra_repr(self) -> str:
        k = self.conv.kernel_size[0]
        return f"grid={self.ctx.grid}, block={self.block}, kernel_size={k}, depthwise=True"

