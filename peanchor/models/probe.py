"""The analysis interface every probed model offers, written once over a model's ``_run``.

A model implements ``_run(images, token_perm, pe_scale, collect, head, num_layers, attention)`` returning
``(logits or None, tokens (B, L, N, D) or None)`` and a ``depth`` property; this mixin turns that
into ``forward``, ``spatial_tokens``, ``forward_with_tokens`` and ``attention_maps``. Our ViT and the timm
adapter share it.

Attention weights are handed out during the pass, block by block, to an :data:`AttentionSink` (so that an
analysis can reduce them at once instead of keeping ``(B, L, H, T, T)``); a model that can do so says
``has_attention_weights``.

Imports: torch only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

#: Called during a pass with (block index, attention weights ``(b, H, T, T)``): the softmax over keys of that
#: block's attention, from the q and k it uses (after RoPE, with any attention bias), the ``num_prefix`` prefix
#: tokens (CLS, registers) first, then the patches in slot order. Per block it is called once for the whole batch,
#: or several times in a row with consecutive slices of the batch (``b`` images each) that together cover it.
AttentionSink = Callable[[int, Tensor], None]


class ProbedModel:
    depth: int
    num_prefix: int
    has_attention_weights: bool = False  # whether forward_with_tokens(..., attention=sink) feeds the sink

    def _run(
        self,
        images: Tensor,
        token_perm: Tensor | None,
        pe_scale: float,
        collect: bool,
        head: bool,
        num_layers: int | None = None,
        attention: AttentionSink | None = None,
    ) -> tuple[Tensor | None, Tensor | None]:
        raise NotImplementedError

    def forward(self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0) -> Tensor:
        """Logits ``(B, C)`` for normalised images ``(B, 3, H, W)``."""
        logits, _ = self._run(images, token_perm, pe_scale, collect=False, head=True)
        assert logits is not None
        return logits

    def spatial_tokens(
        self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0, num_layers: int | None = None
    ) -> Tensor:
        """The patch tokens each block's attention sees (its first norm's output, prefix tokens dropped):
        ``(B, L, N, D)``. ``num_layers`` stops the pass after that many probes (ΔSSDC needs layers 0 and 1).
        """
        if num_layers is not None and not 1 <= num_layers <= self.depth:
            raise ValueError(f"num_layers must be in 1..{self.depth}, got {num_layers}")
        _, tokens = self._run(images, token_perm, pe_scale, collect=True, head=False, num_layers=num_layers)
        assert tokens is not None
        return tokens

    def forward_with_tokens(
        self,
        images: Tensor,
        token_perm: Tensor | None = None,
        pe_scale: float = 1.0,
        attention: AttentionSink | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Logits ``(B, C)`` and the probe tokens ``(B, L, N, D)`` from one pass; with ``attention``, every
        block's attention weights are handed to it during the same pass (see :data:`AttentionSink`)."""
        if attention is not None and not self.has_attention_weights:
            raise ValueError(f"{type(self).__name__} cannot hand out its attention weights")
        logits, tokens = self._run(images, token_perm, pe_scale, collect=True, head=True, attention=attention)
        assert logits is not None and tokens is not None
        return logits, tokens

    def attention_maps(self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0) -> Tensor:
        """Every block's attention weights, ``(B, L, H, T, T)`` with ``T = num_prefix + N`` (prefix tokens
        first). Convenient for a look at a few images; an analysis over many feeds an :data:`AttentionSink`."""
        maps: dict[int, list[Tensor]] = {}
        self.forward_with_tokens(images, token_perm, pe_scale, attention=lambda i, w: maps.setdefault(i, []).append(w))
        return torch.stack([torch.cat(maps[i]) for i in sorted(maps)], dim=1)
