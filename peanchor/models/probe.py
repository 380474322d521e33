"""The analysis interface every probed model offers, written once over a model's ``_run``.

A model implements ``_run(images, token_perm, pe_scale, collect, head, num_layers)`` returning
``(logits or None, tokens (B, L, N, D) or None)`` and a ``depth`` property; this mixin turns that
into ``forward``, ``spatial_tokens`` and ``forward_with_tokens``. Our ViT and the timm adapter share it.

Imports: torch only.
"""

from __future__ import annotations

from torch import Tensor


class ProbedModel:
    depth: int

    def _run(
        self,
        images: Tensor,
        token_perm: Tensor | None,
        pe_scale: float,
        collect: bool,
        head: bool,
        num_layers: int | None = None,
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
        self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0
    ) -> tuple[Tensor, Tensor]:
        """Logits ``(B, C)`` and the probe tokens ``(B, L, N, D)`` from one pass."""
        logits, tokens = self._run(images, token_perm, pe_scale, collect=True, head=True)
        assert logits is not None and tokens is not None
        return logits, tokens
