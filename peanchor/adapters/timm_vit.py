"""Run peanchor's analysis on timm Vision Transformers: :class:`TimmViT` (ViT, DeiT, Eva) on the timm pass
(:class:`~peanchor.adapters.timm_pass.TimmPass`: timm's own modules, only the orchestration of its
``forward_features`` written out), and the registered :class:`TimmBackend`.

Supported families (exact classes, so subclasses with their own forward are refused; :mod:`peanchor.adapters.timm_pe`
reads which one a model is and which PE it has):

* ``timm.models.vision_transformer.VisionTransformer``: learned ``pos_embed`` or
  ``pos_embed='none'``, with or without CLS, register tokens, ``no_embed_class`` either way,
  pre-norm ``Block`` or ``ParallelScalingBlock``;
* ``timm.models.deit.VisionTransformerDistilled`` (DeiT distilled): CLS and distillation tokens, timm's mean head;
* ``timm.models.eva.Eva`` (EVA, EVA02, the ``*_rope_*`` ViTs, DINOv3): APE, axial RoPE
  (``RotaryEmbeddingCat``), mixed RoPE (``RotaryEmbeddingMixed``), DINOv3 RoPE, pre-norm
  ``EvaBlock``.

Beside the table, ``pe_scale`` (α) multiplies Eva's RoPE *angles* (our extension: the rotary table is rebuilt with
timm's own builder from α-scaled frequencies or coordinates, which interpolates towards no rotation), and
``rope.tables`` edits the table each block is handed. The audit's view of the model is
:mod:`peanchor.adapters.timm_audit`.

timm is imported lazily: this module imports without it, and every entry point raises
``PeanchorError("timm is not installed: ...")`` when it is missing.

Imports: torch; :mod:`peanchor.adapters` (backend, timm_audit, timm_hooks, timm_pass, timm_pe,
timm_rope), :mod:`peanchor.interventions`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from torch import Tensor

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.timm_audit import vit_signature, vit_subject
from peanchor.adapters.timm_hooks import join_rope, rope_planes, split_rope
from peanchor.adapters.timm_pass import TimmPass
from peanchor.adapters.timm_pe import SUPPORTED_FAMILIES, TimmPE
from peanchor.adapters.timm_rope import rope_table
from peanchor.core.errors import ConfigError
from peanchor.interventions import EditPass, Intervention, Plane, RopeTables

__all__ = ["SUPPORTED_FAMILIES", "TimmBackend", "TimmPE", "TimmViT"]


class TimmViT(TimmPass):
    """A timm ViT, DeiT or Eva behind peanchor's analysis interface. ``self.model`` is the unchanged timm model.

    Build it with :func:`load_timm_model`, or wrap a model you already have: ``TimmViT(timm_model)``.
    Analysis is meant for eval mode; in training mode the forward still matches timm's, except that
    patch dropout (which removes tokens) is refused.
    """

    families = ("vit", "eva")

    def _pe_points(self) -> set[str]:
        """The table's points, and a rope's: its tables, and other grids (timm builds its table for them)."""
        points = super()._pe_points()
        return points | {"input.grid", "rope.tables"} if self._rope_builder is not None else points

    def _planes(self) -> tuple[Plane, ...]:
        rope = self._rope(1.0)
        m = self.model
        return () if rope is None else rope_planes(m.rope, rope, self.grid, mixed=bool(getattr(m, "rope_mixed", False)))

    def _after_table(self, x: Tensor, grid: tuple[int, int], has_table: bool) -> Tensor:
        """timm's dropout after the table, its patch dropout (refused where it removes tokens) and ``norm_pre``."""
        m = self.model
        if has_table or self.family != "vit":  # timm's VisionTransformer returns before pos_drop without a table
            x = m.pos_drop(x)
        if self.family == "vit":
            x = m.patch_drop(x)
        elif m.patch_drop is not None:
            x, _ = m.patch_drop(x)
        if x.shape[1] != self.num_prefix + grid[0] * grid[1]:
            raise ValueError("patch dropout removed tokens (training mode): call .eval() before the analysis")
        return m.norm_pre(x)

    def _rope(self, alpha: float, grid: tuple[int, int] | None = None) -> Tensor | None:
        """The rotary table Eva hands its blocks (on ``grid``, default the model's), with angles × α (exactly timm's
        own at α = 1)."""
        if self._rope_builder is None:
            return None
        dynamic = bool(self.model.dynamic_img_size)
        return rope_table(self.model.rope, self._rope_builder, grid or self.grid, self.grid, alpha, dynamic)

    def _rope_for_pass(self, intervention: Intervention, run: EditPass | None) -> tuple[Tensor | None, bool]:
        """The rotary table of the pass (α applied, at the pass's grid, edited at ``rope.tables``) and whether it
        has one slice per block."""
        grid = run.grid if run is not None else self.grid
        if self._rope_builder is not None and any(getattr(e, "rope_positions", None) == "interpolate" for e in
                                                  intervention.edits):  # fmt: skip
            raise ConfigError("pe_resample:rope_positions=interpolate is for peanchor's RoPE; timm builds its rotary "
                              "table for another grid itself (rope.get_embed), so leave it at extrapolate")  # fmt: skip
        rope = self._rope(intervention.pe_scale, *([grid] if grid != self.grid else []))  # (N, 2hd), (L, H, N, 2hd)
        per_block = bool(getattr(self.model, "rope_mixed", False)) and rope is not None
        if run is not None and run.acts_at("rope.tables"):
            assert rope is not None  # rope.tables is a hook point of a model with a rope only
            rope = join_rope(run.rope(RopeTables(*split_rope(rope), run.hooks.planes)))  # (L|1, H|1, N, 2hd)
            per_block = True
        return rope, per_block

    def _block_arguments(self, intervention: Intervention, run: EditPass | None,
                         stack: ExitStack) -> Callable[[int], dict[str, Any]]:  # fmt: skip
        """The keyword arguments of block ``i`` in this pass: Eva's blocks take their rotary table."""
        if self.family == "vit":
            return lambda i: {}
        rope, per_block = self._rope_for_pass(intervention, run)
        return lambda i: {"rope": rope[i if rope.shape[0] > 1 else 0] if per_block else rope}  # type: ignore[index]


@BACKENDS.register
class TimmBackend(Backend):
    """timm's ViTs, DeiTs and Evas (every timm model but BEiT, which :mod:`peanchor.adapters.timm_beit` takes;
    an unsupported class is refused by :class:`TimmViT` with the classes it supports)."""

    name = "timm"
    summary = "a timm ViT, DeiT or Eva"

    def accepts(self, model: Any) -> bool:
        module = type(model).__module__
        return module.startswith("timm.") and module != "timm.models.beit"

    def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict[str, Any] | None = None) -> Any:
        return TimmViT(model, model_args=model_args).train(model.training)

    def wraps(self, wrapped: Any) -> bool:
        return type(wrapped) is TimmViT

    def audit_subject(self, wrapped: Any) -> Any:
        """The claim read off the timm model's own attributes (``num_prefix_tokens``, ``no_embed_class``, its rotary
        module), timm's own forward, and timm's ``dynamic_img_size`` path beside ``pe_resample``
        (:func:`peanchor.adapters.timm_audit.vit_subject`)."""
        return vit_subject(wrapped)

    def signature(self, wrapped: Any) -> str:
        """The model class, its table and prefix tokens, its rope's declared options, its attention class and
        whether it takes other sizes."""
        return vit_signature(wrapped)
