"""Run peanchor's analysis on timm Vision Transformers, without forking timm's forward math.

:class:`TimmViT` wraps a timm model behind :class:`peanchor.models.interface.AnalysisInterface`, as our ViT is.
Only the *orchestration* of timm's ``forward_features`` is re-written here (patch_embed → permute → prefix tokens +
pos embed / rope → blocks → norm → head), every step calls timm's own submodules, so that

* ``token_perm`` reorders the patch tokens right after patch embedding and before any positional
  code is added, i.e. the PE stays attached to slots (docs/study.md, "Interventions");
* ``pe_scale`` (α) multiplies the learned ``pos_embed`` table (all of it, prefix rows included
  where it has them, like the paper's APE) and/or the RoPE *angles* (our extension: the rotary
  table is rebuilt with timm's own builder from α-scaled frequencies or coordinates, which
  interpolates towards no rotation);
* the SSDC probe point (each block's first norm output, prefix tokens dropped) is captured by
  forward hooks on that norm during the block's own, unchanged forward;
* attention weights, when asked for, come from timm's own eager attention path
  (:mod:`peanchor.adapters.timm_attention`).

With ``token_perm=None`` (or the identity) and α = 1 the logits are those of ``timm_model(images)``.

Supported families (exact classes, so subclasses with their own forward are refused):

* ``timm.models.vision_transformer.VisionTransformer``: learned ``pos_embed`` or
  ``pos_embed='none'``, with or without CLS, register tokens, ``no_embed_class`` either way,
  pre-norm ``Block`` or ``ParallelScalingBlock``;
* ``timm.models.deit.VisionTransformerDistilled`` (DeiT distilled): CLS and distillation tokens, timm's mean head;
* ``timm.models.eva.Eva`` (EVA, EVA02, the ``*_rope_*`` ViTs, DINOv3): APE, axial RoPE
  (``RotaryEmbeddingCat``), mixed RoPE (``RotaryEmbeddingMixed``), DINOv3 RoPE, pre-norm
  ``EvaBlock``.

timm is imported lazily: this module imports without it, and every entry point raises
``PeanchorError("timm is not installed: ...")`` when it is missing.

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (backend, timm_load, timm_rope, timm_attention, timm_hooks),
:mod:`peanchor.models` (interface, template), :mod:`peanchor.interventions`, :mod:`peanchor.audit` (the subject).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.timm_attention import attention_modules, capture_attention
from peanchor.adapters.timm_hooks import block_sites, capture_probes, join_rope, rope_planes, site_hooks, split_rope
from peanchor.adapters.timm_load import describe, require_timm
from peanchor.adapters.timm_rope import RopeBuilder, rope_kinds, rope_table
from peanchor.core.errors import ConfigError
from peanchor.interventions import EditPass, HookPoints, Intervention, PETable, RopeTables, permute_tokens
from peanchor.interventions.edit import check_grid
from peanchor.models.interface import AttentionSink
from peanchor.models.template import BlockStep, TemplatePass

SUPPORTED_FAMILIES = (
    "timm.models.vision_transformer.VisionTransformer (learned pos_embed or pos_embed='none'; CLS/register tokens)",
    "timm.models.deit.VisionTransformerDistilled (DeiT distilled: CLS and distillation tokens)",
    "timm.models.eva.Eva (EVA/EVA02, *_rope_* and DINOv3 ViTs: APE, axial RoPE, mixed RoPE, DINOv3 RoPE)",
    "timm.models.beit.Beit and timm.models.naflexvit.NaFlexVit (their own backends)",
)


# --------------------------------------------------------------------------------------------
# The wrapper


@dataclass(frozen=True)
class TimmPE:
    """What the analysis needs to know about a timm model's positional encoding (``model.pe``)."""

    name: str
    scalable: bool
    has_ape: bool
    rope: str | None  # "rope", "rope_mixed", "rope_dinov3" or None


class TimmViT(TemplatePass, nn.Module):
    """A timm ViT behind peanchor's analysis interface. ``self.model`` is the unchanged timm model.

    Build it with :func:`load_timm_model`, or wrap a model you already have: ``TimmViT(timm_model)``.
    Analysis is meant for eval mode; in training mode the forward still matches timm's, except that
    patch dropout (which removes tokens) is refused.
    """

    can_restrict_classes = True

    def __init__(self, model: nn.Module, *, model_args: dict[str, Any] | None = None):
        super().__init__()
        timm = require_timm()
        families = self._families()
        family, probe_norms = families.get(type(model), (None, {}))
        if family is None:
            raise ConfigError(f"timm model class {type(model).__module__}.{type(model).__name__} is not supported; "
                              f"supported: {'; '.join(SUPPORTED_FAMILIES)}")  # fmt: skip
        if getattr(model, "dist_token", None) is not None and model.reg_token is not None:  # timm's forward drops them
            raise ConfigError("a distilled timm ViT with register tokens is not supported")
        for i, block in enumerate(model.blocks):
            if type(block) not in probe_norms:
                raise ConfigError(
                    f"block {i} of this timm model is a {type(block).__name__}; supported blocks (pre-norm): "
                    f"{', '.join(c.__name__ for c in probe_norms)}"
                )
        self.model = model
        self.family = family
        self._probe_attr = [probe_norms[type(b)] for b in model.blocks]
        self._attention = attention_modules(model.blocks)  # None: this model's weights cannot be had
        self._pe = self._read_pe()
        self._model_args = dict(model_args) if model_args is not None else describe(model, timm.__version__)
        self.logit_subset: Tensor | None = None  # see restrict_to_classes

    @staticmethod
    def _families() -> dict[type, tuple[str, dict[type, str]]]:
        """Model class → (family, block class → the norm whose output its attention sees: the probe point)."""
        from timm.models.deit import VisionTransformerDistilled
        from timm.models.eva import Eva, EvaBlock
        from timm.models.vision_transformer import Block, ParallelScalingBlock, VisionTransformer

        vit = ("vit", {Block: "norm1", ParallelScalingBlock: "in_norm"})
        return {VisionTransformer: vit, VisionTransformerDistilled: vit, Eva: ("eva", {EvaBlock: "norm1"})}

    def _read_pe(self) -> TimmPE:
        """The PE of the model: its table and Eva's rotary embedding (refused when timm's rope is unknown here)."""
        rope = getattr(self.model, "rope", None) if self.family == "eva" else None
        rope_name = None
        self._rope_builder: RopeBuilder | None = None
        if rope is not None:
            kinds = rope_kinds()
            if type(rope) not in kinds:
                raise ConfigError(f"timm rotary embedding {type(rope).__name__} is not supported; "
                                  f"supported: {', '.join(c.__name__ for c in kinds)}")  # fmt: skip
            rope_name, self._rope_builder = kinds[type(rope)]
        has_ape = self.model.pos_embed is not None
        name = "_".join(p for p in (rope_name, "ape" if has_ape else None) if p) or "none"
        return TimmPE(name=f"timm:{name}", scalable=has_ape or rope is not None, has_ape=has_ape, rope=rope_name)

    def restrict_to_classes(self, indices: list[int]) -> None:
        """Keep only these output classes, in this order (e.g. ImageNet-100 inside an ImageNet-1k head)."""
        self.logit_subset = torch.as_tensor(indices, dtype=torch.long)

    # ---- what the analysis reads ------------------------------------------------------------

    @property
    def pe(self) -> TimmPE:
        return self._pe

    @property
    def pe_name(self) -> str:
        return self._pe.name

    @property
    def has_attention_weights(self) -> bool:  # type: ignore[override]
        """Whether every block's attention is one timm module :mod:`~peanchor.adapters.timm_attention` reads."""
        return self._attention is not None

    @property
    def pe_scalable(self) -> bool:
        """Whether ``pe_scale`` changes anything (the model has a ``pos_embed`` or a rope)."""
        return self._pe.scalable

    @property
    def grid(self) -> tuple[int, int]:
        rows, cols = self.model.patch_embed.grid_size
        return int(rows), int(cols)

    @property
    def num_classes(self) -> int:  # 0: built without a head (the pass's logits are then its features)
        return int(self.model.num_classes)

    @property
    def depth(self) -> int:
        return len(self.model.blocks)

    @property
    def num_prefix(self) -> int:
        """Tokens in front of the patches (CLS, a distillation token, register tokens), dropped from the probes."""
        return int(self.model.num_prefix_tokens)

    @property
    def img_size(self) -> tuple[int, int]:
        rows, cols = self.model.patch_embed.img_size
        return int(rows), int(cols)

    @property
    def mean(self) -> tuple[float, ...]:
        """Normalisation mean from timm's pretrained config (ImageNet's when it has none)."""
        return tuple((getattr(self.model, "pretrained_cfg", None) or {}).get("mean", (0.485, 0.456, 0.406)))

    @property
    def std(self) -> tuple[float, ...]:
        return tuple((getattr(self.model, "pretrained_cfg", None) or {}).get("std", (0.229, 0.224, 0.225)))

    @property
    def model_args(self) -> dict[str, Any]:
        """Provenance (JSON-able): ``load_timm_model(name, weights=..., num_classes=..., img_size=...,
        **kwargs)`` with these values rebuilds the model. ``source`` is always ``"timm"``."""
        return dict(self._model_args)

    def extra_repr(self) -> str:
        return (
            f"family={self.family}, pe={self.pe_name}, grid={self.grid}, depth={self.depth}, prefix={self.num_prefix}"
        )

    # ---- the forward pass ---------------------------------------------------------------------

    def _probe_norm(self, index: int) -> nn.Module:
        return getattr(self.model.blocks[index], self._probe_attr[index])

    def _embed_patches(self, images: Tensor, grid: tuple[int, int] | None = None) -> Tensor:
        grid = grid or self.grid
        embed = self.model.patch_embed
        if grid != self.grid:  # pe_resample: timm's patch embedding takes the other size for this pass
            check_grid(images, grid, embed.patch_size)
            strict, embed.strict_img_size = embed.strict_img_size, False
            try:
                x = embed(images)
            finally:
                embed.strict_img_size = strict
        else:
            x = embed(images)
        if x.dim() == 4:  # dynamic_img_size models emit (B, H, W, D) and flatten after the PE
            b, h, w, d = x.shape
            if (h, w) != grid:
                raise ValueError(
                    f"images give a {h}x{w} patch grid but the model's grid is {self.grid[0]}x{self.grid[1]}; "
                    f"resize the images to {self.img_size[0]}x{self.img_size[1]}"
                )
            x = x.reshape(b, h * w, d)
        return x  # (B, N, D), row-major slots

    def _prefix_tokens(self, batch: int) -> list[Tensor]:
        """The prefix tokens in timm's ``_pos_embed`` order, each ``(B, 1|R, D)``: CLS, DeiT's distillation token or
        the registers; every path that builds the sequence takes them from here."""
        m = self.model
        tokens = (m.cls_token, getattr(m, "dist_token", None), m.reg_token)
        return [t.expand(batch, -1, -1) for t in tokens if t is not None]

    def _add_prefix_and_ape(self, x: Tensor, alpha: float) -> Tensor:
        """timm's ``_pos_embed`` order (CLS, the distillation token or registers, then patches), with the table
        scaled by α."""
        m = self.model
        prefix = self._prefix_tokens(x.shape[0])
        pos = m.pos_embed  # (1, [P +] N, D) or None
        if pos is not None and alpha != 1.0:
            pos = pos * alpha
        if pos is None:
            x = torch.cat(prefix + [x], dim=1) if prefix else x  # (B, P + N, D)
            # timm's VisionTransformer returns before pos_drop when it has no pos_embed; Eva does not.
            return x if self.family == "vit" else m.pos_drop(x)
        if m.no_embed_class:
            x = x + pos  # the table covers the patch slots only
            x = torch.cat(prefix + [x], dim=1) if prefix else x
        else:
            x = torch.cat(prefix + [x], dim=1) if prefix else x
            x = x + pos  # the table has rows for the prefix tokens too
        return m.pos_drop(x)  # (B, P + N, D)

    def _add_prefix_and_table(self, x: Tensor, run: EditPass, alpha: float) -> Tensor:
        """:meth:`_add_prefix_and_ape` with the table edited by ``run`` (the same sums, in one place)."""
        m = self.model
        prefix = self._prefix_tokens(x.shape[0])
        pos = m.pos_embed if alpha == 1.0 else m.pos_embed * alpha  # (1, [P +] N, D)
        p = pos.shape[1] - self.num_patches
        table = run.table(PETable(pos[:, :p] if p else None, pos[:, p:], self.grid))
        return m.pos_drop(table.added_to(torch.cat(prefix + [x], dim=1) if prefix else x))  # (B, P + N, D)

    @property
    def hook_points(self) -> HookPoints:
        m = self.model
        points = {f"blocks.{{k}}.{site}" for site in block_sites(m.blocks)}
        rope = self._rope(1.0)
        planes = ()
        if m.pos_embed is not None or rope is not None:
            points |= {"pe.table", "input.grid"} if m.pos_embed is not None else {"input.grid"}
        if rope is not None:
            points.add("rope.tables")
            planes = rope_planes(m.rope, rope, self.grid, mixed=bool(getattr(m, "rope_mixed", False)))
        heads = int(getattr(m.blocks[0], "attn", m.blocks[0]).num_heads)
        return HookPoints(self.pe_name, frozenset(points), self.depth, heads, self.grid, self.num_prefix, planes)

    def _rope(self, alpha: float, grid: tuple[int, int] | None = None) -> Tensor | None:
        """The rotary table Eva hands its blocks (on ``grid``, default the model's), with angles × α (exactly timm's
        own at α = 1)."""
        rope = getattr(self.model, "rope", None) if self.family == "eva" else None
        if rope is None:
            return None
        assert self._rope_builder is not None  # set in __init__ for every supported rope
        dynamic = bool(self.model.dynamic_img_size)
        return rope_table(rope, self._rope_builder, grid or self.grid, self.grid, alpha, dynamic)

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

    @contextmanager
    def _blocks(
        self, intervention: Intervention, run: EditPass | None, attention: AttentionSink | None
    ) -> Iterator[BlockStep]:
        """timm's blocks, each called as timm's ``forward_features`` calls it; the probe is read by a hook on the
        block's first norm, the edits' sites by hooks on its modules, the attention from timm's eager path."""
        blocks = self.model.blocks
        seen: list[Tensor] = []
        with ExitStack() as stack:
            arguments = self._block_arguments(intervention, run, stack)
            stack.enter_context(capture_probes([self._probe_norm(i) for i in range(self.depth)], seen, 0))
            stack.enter_context(capture_attention(self._attention or [], attention))  # eager while a sink listens
            if run is not None:
                stack.enter_context(site_hooks(blocks, run, run.hooks.num_heads))

            def step(i: int, x: Tensor) -> tuple[Tensor, Tensor]:
                seen.clear()
                x = blocks[i](x, **arguments(i))
                if len(seen) != 1:
                    raise RuntimeError(f"block {i} ran its probe norm {len(seen)} times; expected once")
                return x, seen[0]

            yield step

    def _probe(self, index: int, x: Tensor) -> Tensor:
        return self._probe_norm(index)(x)  # (B, P + N, D)

    def _head(self, x: Tensor) -> Tensor:
        m = self.model
        logits = m.forward_head(m.norm(x))  # (B, C)
        if self.logit_subset is not None:
            logits = logits[:, self.logit_subset.to(logits.device)]  # (B, C_subset)
        return logits

    def _embed(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
        """The stream entering block 0, as timm's ``forward_features`` builds it (patches permuted, table edited)."""
        m = self.model
        x = self._embed_patches(images, run.grid if run is not None else None)  # (B, N, D)
        if intervention.token_perm is not None:
            x = permute_tokens(x, intervention.token_perm)  # content moves, slots (and their PE) stay
        if run is not None and run.acts_at("pe.table"):
            x = self._add_prefix_and_table(x, run, intervention.pe_scale)
        else:
            x = self._add_prefix_and_ape(x, intervention.pe_scale)  # (B, P + N, D)
        if self.family == "vit":
            x = m.patch_drop(x)
        elif m.patch_drop is not None:
            x, _ = m.patch_drop(x)
        n = run.grid[0] * run.grid[1] if run is not None else self.num_patches
        if x.shape[1] != self.num_prefix + n:
            raise ValueError("patch dropout removed tokens (training mode): call .eval() before the analysis")
        return m.norm_pre(x)


_TIMM_LAYOUTS = {"rope": "axial", "rope_mixed": "mixed", "rope_dinov3": "dinov3"}


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
        module), timm's own forward, and timm's ``dynamic_img_size`` path beside ``pe_resample``."""
        from peanchor.audit.adapters import own_path
        from peanchor.audit.observe import TimmObserver
        from peanchor.audit.subject import AuditSubject, Claim

        inner = wrapped.model
        prefix = int(inner.num_prefix_tokens)
        table = getattr(inner, "pos_embed", None) is not None
        rows = (0 if getattr(inner, "no_embed_class", False) else prefix) if table else None
        rope = wrapped.pe.rope
        kind = "rotary" if rope else "learned table" if table else "none"
        said = f"timm {type(inner).__name__}: pos_embed={'yes' if table else 'none'}, rope={rope or 'none'}, "
        claim = Claim(kind, _TIMM_LAYOUTS.get(rope) if rope else None, rows, prefix,
                      source=said + f"num_prefix_tokens={prefix}")  # fmt: skip
        subject = AuditSubject(wrapped, wrapped.pe_name, "timm", claim, wrapped.img_size[0] // wrapped.grid[0],
                               wrapped.pe_scalable, None, False, lambda images: inner(images),
                               observer=TimmObserver(wrapped))  # fmt: skip
        if table and not rope and getattr(inner, "dynamic_img_size", False):
            subject.own_resample = lambda: own_path(subject, lambda x: inner(x), "bicubic", True)
        return subject

    def signature(self, wrapped: Any) -> str:
        """The model class, its table and prefix tokens, its rope's declared options, its attention class and
        whether it takes other sizes."""
        inner = wrapped.model
        rope = getattr(inner, "rope", None)
        keys = ("temperature", "in_pixels", "grid_indexing", "rotate_half", "grid_type", "normalize_coords")
        options = [f"{k}={getattr(rope, k)}" for k in keys if hasattr(rope, k)]
        options.append(f"ref={getattr(rope, 'ref_feat_shape', None) is not None}")
        rope_said = "none" if rope is None else f"{type(rope).__name__}({', '.join(options)})"
        table = getattr(inner, "pos_embed", None) is not None
        return (f"{type(inner).__name__} table={table} no_embed_class={getattr(inner, 'no_embed_class', False)} "
                f"prefix={inner.num_prefix_tokens} rope={rope_said} "
                f"attn={type(getattr(inner.blocks[0], 'attn', inner.blocks[0])).__name__} "
                f"dynamic={getattr(inner, 'dynamic_img_size', False)}")  # fmt: skip
