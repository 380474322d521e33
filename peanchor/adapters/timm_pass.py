"""The pass every timm wrapper runs, without forking timm's forward math: :class:`TimmPass`, the base of the ViT /
DeiT / Eva (:mod:`peanchor.adapters.timm_vit`), BEiT (:mod:`peanchor.adapters.timm_beit`) and NaFlexViT
(:mod:`peanchor.adapters.timm_naflex`) wrappers, on :class:`~peanchor.models.template.TemplatePass`.

Only the *orchestration* of timm's ``forward_features`` is written here (patch embedding → prefix tokens and the
table → blocks → norm → head); every step calls timm's own submodules, so that

* ``token_perm`` reorders the patch tokens right after the patch embedding, before any positional code is added:
  the PE stays attached to slots (docs/study.md, "Interventions");
* ``pe_scale`` (α) multiplies the absolute table, prefix rows included where it has them (like the paper's APE);
  a family scales its other positional code in its own step (Eva's rotary angles, BEiT's bias);
* the SSDC probe point (each block's first norm output, prefix tokens dropped) is captured by forward hooks on that
  norm during the block's own, unchanged forward;
* attention weights, when asked for, come from timm's own eager path (:mod:`peanchor.adapters.timm_attention`).

With ``token_perm=None`` (or the identity) and α = 1 the logits are those of ``timm_model(images)``. A wrapper
names its families (``families``, :mod:`peanchor.adapters.timm_pe`) and fills in what differs: its dropout and
pre-norm (:meth:`TimmPass._after_table`), and where it has them its own patches, prefix tokens, table, hook
points and per-block arguments.

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (timm_attention, timm_hooks, timm_load, timm_pe),
:mod:`peanchor.models` (interface, template), :mod:`peanchor.interventions`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any, ClassVar

import torch
from torch import Tensor, nn

from peanchor.adapters.timm_attention import attention_modules, capture_attention
from peanchor.adapters.timm_hooks import block_sites, capture_probes, site_hooks
from peanchor.adapters.timm_load import describe, require_timm
from peanchor.adapters.timm_pe import TimmPE, read_family, read_pe
from peanchor.interventions import EditPass, HookPoints, Intervention, PETable, Plane, permute_tokens
from peanchor.interventions.edit import check_grid
from peanchor.models.interface import AttentionSink
from peanchor.models.template import BlockStep, TemplatePass

__all__ = ["TimmPass"]


class TimmPass(TemplatePass, nn.Module):
    """A timm model behind peanchor's analysis interface (see the module docstring); ``self.model`` is unchanged.
    Meant for eval mode; in training mode the forward still matches timm's, but patch dropout is refused."""

    can_restrict_classes = True
    #: The families (:func:`peanchor.adapters.timm_pe.read_family`) whose model classes this wrapper takes.
    families: ClassVar[tuple[str, ...]]

    def __init__(self, model: nn.Module, *, model_args: dict[str, Any] | None = None):
        super().__init__()
        timm = require_timm()
        self.family, self._probe_attr = read_family(model, self.families)
        self.model = model
        self._attention = attention_modules(model.blocks)  # None: this model's weights cannot be had
        self._pe, self._rope_builder = read_pe(model, self.family)
        self._model_args = dict(model_args) if model_args is not None else describe(model, timm.__version__)
        self.logit_subset: Tensor | None = None  # see restrict_to_classes

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
        """Whether ``pe_scale`` changes anything (the model has a table, a rope or a bias)."""
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

    @property
    def hook_points(self) -> HookPoints:
        """The block sites every block offers and the family's PE points (:meth:`_pe_points`)."""
        first = self.model.blocks[0]
        points = frozenset({f"blocks.{{k}}.{site}" for site in block_sites(self.model.blocks)} | self._pe_points())
        heads = int(getattr(first, "attn", first).num_heads)
        return HookPoints(self.pe_name, points, self.depth, heads, self.grid, self.num_prefix, self._planes())

    def _pe_points(self) -> set[str]:
        """The PE's hook points: a table's, moved to another grid with it."""
        return {"pe.table", "input.grid"} if self._pe.has_ape else set()

    def _planes(self) -> tuple[Plane, ...]:
        return ()  # no rotary table: no planes

    # ---- the steps of the pass ----------------------------------------------------------------

    def _embed(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
        """The stream entering block 0, as timm's ``forward_features`` builds it: the patches (moved by
        ``token_perm`` before any positional code), the prefix tokens, the table at α (edited at ``pe.table``),
        then the family's dropout and pre-norm."""
        grid = run.grid if run is not None else self.grid
        edited = run is not None and run.acts_at("pe.table")
        x = self._embed_patches(images, grid)  # (B, N, D)
        if intervention.token_perm is not None:
            x = permute_tokens(x, intervention.token_perm)  # content moves, slots (and their PE) stay
        table = self._table(intervention.pe_scale, self.grid if edited else grid, x)  # None: no table
        if edited:
            assert run is not None and table is not None  # pe.table is a point of a model with a table only
            table = run.table(table)  # an edit at input.grid moves it to the pass's grid
        prefix = self._prefix_tokens(x.shape[0])
        x = torch.cat(prefix + [x], dim=1) if prefix else x  # (B, P + N, D)
        x = x if table is None else table.added_to(x)  # the same sums as timm's, prefix rows where it has them
        return self._after_table(x, grid, table is not None)

    def _embed_patches(self, images: Tensor, grid: tuple[int, int]) -> Tensor:
        """timm's patch embedding of ``images`` at ``grid`` ``(B, N, D)``, row-major slots."""
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
        return x  # (B, N, D)

    def _prefix_tokens(self, batch: int) -> list[Tensor]:
        """The prefix tokens in timm's ``_pos_embed`` order, each ``(B, 1|R, D)``: CLS, DeiT's distillation token or
        the registers; every path that builds the sequence takes them from here."""
        m = self.model
        tokens = (m.cls_token, getattr(m, "dist_token", None), getattr(m, "reg_token", None))
        return [t.expand(batch, -1, -1) for t in tokens if t is not None]

    def _table(self, alpha: float, grid: tuple[int, int], like: Tensor) -> PETable | None:
        """The absolute table × α (None: the model has none): ``pos_embed``, split into the rows of the prefix
        tokens (where it has them: not with ``no_embed_class``) and of the patch slots; always the model's grid."""
        pos = self.model.pos_embed  # (1, [P +] N, D) or None
        if pos is None:
            return None
        pos = pos if alpha == 1.0 else pos * alpha
        p = pos.shape[1] - self.num_patches
        return PETable(pos[:, :p] if p else None, pos[:, p:], self.grid)

    @abstractmethod
    def _after_table(self, x: Tensor, grid: tuple[int, int], has_table: bool) -> Tensor:
        """What timm does between adding the table and the first block (dropout, patch dropout, pre-norm)."""

    def _block_arguments(self, intervention: Intervention, run: EditPass | None,
                         stack: ExitStack) -> Callable[[int], dict[str, Any]]:  # fmt: skip
        """The keyword arguments of block ``i`` in this pass (none here; Eva's rope, BEiT's bias)."""
        return lambda i: {}

    def _probe_norm(self, index: int) -> nn.Module:
        return getattr(self.model.blocks[index], self._probe_attr[index])

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
