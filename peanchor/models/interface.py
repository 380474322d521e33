"""The analysis interface every model offers: one public pass, :meth:`AnalysisInterface.forward_intermediates`.

A model (our ViT, the timm adapter, the transformers adapters) implements exactly one method::

    forward_intermediates(images, intervention=NO_INTERVENTION, *, layers=None, head=True, attention=None)
        -> Intermediates(logits (B, C) or None, tokens (B, L, N, D) or None)

in the spirit of timm's ``forward_intermediates``: one pass under one :class:`~peanchor.interventions.Intervention`
(token order and PE scale) that returns what the lenses need. ``tokens`` are the patch tokens each block's
attention sees (its first norm's output, prefix tokens dropped), ``layers`` of them (None: every block; 0: none);
with ``head=False`` the pass stops right after the last layer it needs. Attention weights are handed out during
the pass, block by block, to an :data:`AttentionSink`, so that an analysis can reduce them at once instead of
keeping ``(B, L, H, T, T)``; a model that can do so says ``has_attention_weights``.

Besides the pass, a model declares what the analysis reads of it, each spelled once here and implemented once per
backend (nothing is probed with ``getattr``): its patch ``grid``, ``depth``, ``num_prefix`` (the tokens before the
patches), ``img_size``, ``num_classes`` (0: no classification head; ``has_head`` follows from it), its PE's
``pe_name`` and whether α means anything to it (``pe_scalable``), ``has_attention_weights``, the ``hook_points`` of
the edits, ``model_args`` (its provenance) and the normalisation it carries (``mean``/``std``, None where it carries
none). A class that leaves one of them out cannot be instantiated.

Edits (``intervention.edits``: pe_zero, rope_planes, head_ablate, patch, ...) act at the named hook points a model
declares in :attr:`AnalysisInterface.hook_points` (:mod:`peanchor.interventions.edit`); a model binds them once per
pass with :meth:`AnalysisInterface._bind`, and a pass without edits is the plain pass, untouched.

``start=Start(layer, residual, tokens, source, donors)`` (:class:`~peanchor.interventions.Start`) begins the pass at
block ``layer`` from the residual stream entering it in an earlier pass of the same images (kept there by a ``Record`` of
``blocks.{layer-1}.residual``): the blocks before it do not run, their tokens are the earlier pass's, and the
pass's own RoPE tables, attention bias and prefix tokens are built as in any pass; ``donors`` are ``patch`` donor
activations already computed, whose donor passes are not run again. The pass must have the earlier pass's token
order, α and edits, and add only edits that change no block before ``layer`` (``Edit.first_layer``; ``Start.check``
refuses it otherwise): :func:`peanchor.interventions.doses.forward_doses` starts passes so. A started pass takes no
attention sink (the blocks before it would not feed one), and starts before the last block.

This mixin turns that one method into ``forward``, ``spatial_tokens``, ``forward_with_tokens`` and
``attention_maps`` (keyword forms of the same pass).

No backend writes the pass itself (peanchor's ViT, timm's, transformers'):
:class:`~peanchor.models.template.TemplatePass` runs it (embed → blocks → head, with the hook points) and each fills
in its steps.

Imports: torch; :mod:`peanchor.interventions`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor

from peanchor.interventions import NO_INTERVENTION, EditPass, HookPoints, Intervention, Start

__all__ = ["AttentionSink", "Intermediates", "AnalysisInterface"]

#: Called during a pass with (block index, attention weights ``(b, H, T, T)``): the softmax over keys of that
#: block's attention, from the q and k it uses (after RoPE, with any attention bias), the ``num_prefix`` prefix
#: tokens (CLS, registers) first, then the patches in slot order. Per block it is called once for the whole batch,
#: or several times in a row with consecutive slices of the batch (``b`` images each) that together cover it.
AttentionSink = Callable[[int, Tensor], None]


@dataclass
class Intermediates:
    """What one pass returns: the logits (``head=True``) and the spatial tokens (``layers`` != 0)."""

    logits: Tensor | None  # (B, C)
    tokens: Tensor | None  # (B, L, N, D): LN1 output of each of the first L blocks, prefix tokens dropped


class AnalysisInterface(ABC):
    """The analysis interface (see the module docstring): one pass, and what the analysis reads of the model."""

    #: The normalisation the model carries (its training data's, or its family's): what ``peanchor.analyze``
    #: normalises tensors with when given no ``mean=``/``std=``. None: it carries none.
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    #: Whether :meth:`restrict_to_classes` can keep a subset of its outputs (an ImageNet-1k head on an ImageNet
    #: subset).
    can_restrict_classes: ClassVar[bool] = False

    @abstractmethod
    def forward_intermediates(
        self,
        images: Tensor,
        intervention: Intervention = NO_INTERVENTION,
        *,
        layers: int | None = None,
        head: bool = True,
        attention: AttentionSink | None = None,
        start: Start | None = None,
    ) -> Intermediates:
        """One pass over normalised ``images (B, 3, H, W)`` under ``intervention``.

        ``layers``: how many layers of tokens to return, from block 0 on (None: every block, 0: none). ``head``: compute
        the logits; without them the pass stops after the last of them. ``attention``: fed every block's attention
        weights during the pass (see :data:`AttentionSink`). ``start``: begin at a block of an earlier pass, with
        donors already computed (see the module docstring).
        """

    # ---- what the analysis reads ----------------------------------------------------------------------------------

    @property
    @abstractmethod
    def grid(self) -> tuple[int, int]:
        """The patch grid (rows, cols) of the images it takes: ``tokens`` hold ``rows · cols`` patches."""

    @property
    @abstractmethod
    def depth(self) -> int:
        """Its blocks, i.e. the layers of ``tokens`` a full pass returns."""

    @property
    @abstractmethod
    def num_prefix(self) -> int:
        """Tokens before the patches in each block's sequence (CLS, distillation, registers), dropped from
        ``tokens`` and first in the attention weights."""

    @property
    @abstractmethod
    def img_size(self) -> tuple[int, int]:
        """The image size (rows, cols) in pixels it takes."""

    @property
    @abstractmethod
    def num_classes(self) -> int:
        """The outputs of its classification head, 0 without one (the pass's ``logits`` are then its features)."""

    @property
    def has_head(self) -> bool:
        """Whether its ``logits`` are class scores (``num_classes`` > 0): without a head it has no accuracy."""
        return self.num_classes > 0

    @property
    @abstractmethod
    def pe_name(self) -> str:
        """Its positional encoding's name (``ape``, ``timm:rope_mixed``, ``hf:ape``, ...)."""

    @property
    @abstractmethod
    def pe_scalable(self) -> bool:
        """Whether its PE responds to ``pe_scale`` (α): the α sweep is measured only then."""

    @property
    @abstractmethod
    def has_attention_weights(self) -> bool:
        """Whether ``forward_intermediates(..., attention=sink)`` feeds the sink."""

    @property
    @abstractmethod
    def hook_points(self) -> HookPoints:
        """The hook points this model implements, with the sizes edits are checked against."""

    @property
    @abstractmethod
    def model_args(self) -> dict[str, Any]:
        """Where the model came from, JSON-able (a peanchor model: its ``ViTArgs``; an adapter: its source)."""

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    def restrict_to_classes(self, indices: list[int]) -> None:
        """Keep only these outputs, in this order (where ``can_restrict_classes``)."""
        raise NotImplementedError(f"{type(self).__name__} cannot restrict its outputs to a subset of classes")

    def _bind(self, images: Tensor, intervention: Intervention, start: Start | None = None) -> EditPass | None:
        """The pass's edits checked against :attr:`hook_points` and bound to the donor activations ``patch`` reads
        (each donor one pass of ``images`` without its tokens, unless ``start.donors`` has it); None without edits.
        A pass that would differ from ``start.source``'s before ``start.layer`` is refused (``Start.check``)."""
        started = start is not None and start.layer > 0
        if not intervention.edits and not started:
            return None
        hooks = self.hook_points
        if started:
            start.check(intervention, hooks)  # type: ignore[union-attr]
        if not intervention.edits:
            return None
        n = hooks.grid[0] * hooks.grid[1]
        for edit in intervention.edits:
            if (grid := edit.pass_grid(hooks)) is not None:
                n = grid[0] * grid[1]
        donors = start.donors if start is not None else None
        run = lambda iv: self.forward_intermediates(images, iv, layers=0)  # noqa: E731
        return intervention.bind(hooks, run, n, images.device, donors)

    def _first_block(self, start: Start | None, attention: AttentionSink | None) -> int:
        """The block a pass begins at (0 without ``start``); a started pass takes no attention sink."""
        if start is None or not start.layer:
            return 0
        if not 0 < start.layer < self.depth:
            raise ValueError(f"a pass cannot start at block {start.layer} of {self.depth}")
        if attention is not None:
            raise ValueError("a pass started after block 0 cannot feed an attention sink")
        return start.layer

    def _layer_count(self, layers: int | None, head: bool) -> int:
        """How many layers of tokens a pass returns (``layers``: None means all), checked for every implementation."""
        count = self.depth if layers is None else layers
        if not 0 <= count <= self.depth:
            raise ValueError(f"layers must be in 0..{self.depth}, got {layers}")
        if not head and count == 0:
            raise ValueError("forward_intermediates with head=False and layers=0 has nothing to compute")
        return count

    def forward(self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0) -> Tensor:
        """Logits ``(B, C)`` for normalised images ``(B, 3, H, W)``."""
        logits = self.forward_intermediates(images, Intervention(token_perm, pe_scale), layers=0).logits
        assert logits is not None
        return logits

    def spatial_tokens(
        self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0, num_layers: int | None = None
    ) -> Tensor:
        """The patch tokens each block's attention sees (its first norm's output, prefix tokens dropped):
        ``(B, L, N, D)``. ``num_layers`` stops the pass after that many layers (ΔSSDC needs layers 0 and 1).
        """
        if num_layers is not None and not 1 <= num_layers <= self.depth:
            raise ValueError(f"num_layers must be in 1..{self.depth}, got {num_layers}")
        out = self.forward_intermediates(images, Intervention(token_perm, pe_scale), layers=num_layers, head=False)
        assert out.tokens is not None
        return out.tokens

    def forward_with_tokens(
        self,
        images: Tensor,
        token_perm: Tensor | None = None,
        pe_scale: float = 1.0,
        attention: AttentionSink | None = None,
    ) -> tuple[Tensor, Tensor]:
        """Logits ``(B, C)`` and the spatial tokens ``(B, L, N, D)`` from one pass; with ``attention``, every
        block's attention weights are handed to it during the same pass (see :data:`AttentionSink`)."""
        if attention is not None and not self.has_attention_weights:
            raise ValueError(f"{type(self).__name__} cannot hand out its attention weights")
        out = self.forward_intermediates(images, Intervention(token_perm, pe_scale), attention=attention)
        assert out.logits is not None and out.tokens is not None
        return out.logits, out.tokens

    def attention_maps(self, images: Tensor, token_perm: Tensor | None = None, pe_scale: float = 1.0) -> Tensor:
        """Every block's attention weights, ``(B, L, H, T, T)`` with ``T = num_prefix + N`` (prefix tokens
        first). Convenient for a look at a few images; an analysis over many feeds an :data:`AttentionSink`."""
        maps: dict[int, list[Tensor]] = {}
        self.forward_with_tokens(images, token_perm, pe_scale, attention=lambda i, w: maps.setdefault(i, []).append(w))
        return torch.stack([torch.cat(maps[i]) for i in sorted(maps)], dim=1)
