"""The one pass every backend runs: embed → blocks → head, with the hook points in between.

:class:`TemplatePass` implements :meth:`~peanchor.models.interface.AnalysisInterface.forward_intermediates` once:
it checks the layer count and the start block, binds the edits (``_bind``), builds the stream entering the first
block (or takes ``start.residual``), runs the blocks from there, collects each block's probe (its first norm's
output, prefix tokens dropped), applies the ``blocks.{k}.residual`` edits after each block, stops after the last
probe a pass without head needs, and ends with the head. A backend fills in the steps:

* :meth:`TemplatePass._embed`: patches (permuted by ``intervention.token_perm``), prefix tokens and the absolute
  code at α (edited at ``pe.table``): ``(B, P + N, D)``;
* :meth:`TemplatePass._blocks`: a context manager, entered for the pass, that yields the per-block step
  ``step(i, x) -> (x, probe)``; it is where a backend sets up what its blocks share in one pass (its rotary tables
  or attention bias at α, edited at ``rope.tables`` / ``pe.bias``, the site hooks of the edits, the attention
  sink);
* :meth:`TemplatePass._probe`: block ``i``'s first norm applied to ``x``, for the last probe of a pass that needs
  neither the rest of that block nor the head;
* :meth:`TemplatePass._head`: the logits (or features) from the last block's output.

Imports: torch; :mod:`peanchor.interventions`, :mod:`peanchor.models` (interface).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager

import torch
from torch import Tensor

from peanchor.interventions import NO_INTERVENTION, EditPass, Intervention, Start
from peanchor.models.interface import AnalysisInterface, AttentionSink, Intermediates

__all__ = ["BlockStep", "TemplatePass"]

#: One block of a pass: ``step(i, x) -> (x after block i, block i's probe (B, P + N, D))``.
BlockStep = Callable[[int, Tensor], tuple[Tensor, Tensor]]


class TemplatePass(AnalysisInterface):
    """``forward_intermediates`` written once (see the module docstring); a backend implements the four steps."""

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
        """One pass under ``intervention`` (see :class:`~peanchor.models.interface.AnalysisInterface`)."""
        count = self._layer_count(layers, head)
        first = self._first_block(start, attention)
        run = self._bind(images, intervention, start)  # None: the plain pass
        if first:
            assert start is not None and start.residual is not None  # Start checks both
            x = start.residual  # (B, P + N, D): the stream entering block `first`
        else:
            x = self._embed(images, intervention, run)  # (B, P + N, D)
        probes: list[Tensor] = start.probes_before(count) if start is not None else []
        p = self.num_prefix
        with self._blocks(intervention, run, attention) as step:
            for i in range(first, self.depth):
                if not head and i >= count - 1:
                    if i == count - 1:
                        probes.append(self._probe(i, x)[:, p:])  # the last probe needs no attention/MLP
                    break
                x, h = step(i, x)
                if i < count:
                    probes.append(h[:, p:])  # (B, N, D)
                if run is not None and run.acts_on_block("residual", i):
                    x = run.block("residual", i, x)
        tokens = torch.stack(probes, dim=1) if probes else None  # (B, L, N, D)
        logits = self._head(x) if head else None  # (B, C)
        return Intermediates(logits, tokens)

    @abstractmethod
    def _embed(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
        """The stream entering block 0 ``(B, P + N, D)``: patches permuted, prefix tokens, the absolute code."""

    @abstractmethod
    def _blocks(
        self, intervention: Intervention, run: EditPass | None, attention: AttentionSink | None
    ) -> AbstractContextManager[BlockStep]:
        """For the pass, the step that runs block ``i`` on ``x`` and returns its output and its probe."""

    @abstractmethod
    def _probe(self, index: int, x: Tensor) -> Tensor:
        """Block ``index``'s first norm of ``x`` ``(B, P + N, D)``: what its attention would see."""

    @abstractmethod
    def _head(self, x: Tensor) -> Tensor:
        """The logits ``(B, C)`` (or features) from the last block's output ``(B, P + N, D)``."""
