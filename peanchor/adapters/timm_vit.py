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

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (timm_rope, timm_attention, timm_hooks), :mod:`peanchor.models.interface`,
:mod:`peanchor.interventions`, :mod:`peanchor.weights`.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.adapters.timm_attention import attention_modules, capture_attention
from peanchor.adapters.timm_rope import RopeBuilder, rope_kinds, rope_table
from peanchor.errors import CheckpointError, ConfigError, PeanchorError
from peanchor.adapters.timm_hooks import block_sites, capture_probes, join_rope, rope_planes, site_hooks, split_rope
from peanchor.interventions import NO_INTERVENTION, EditPass, HookPoints, Intervention, PETable, RopeTables, Start
from peanchor.interventions.edit import check_grid
from peanchor.interventions import permute_tokens
from peanchor.models.interface import AttentionSink, Intermediates, AnalysisInterface
from peanchor.weights import load_strict, read_state_dict as read_weights_file

SUPPORTED_FAMILIES = (
    "timm.models.vision_transformer.VisionTransformer (learned pos_embed or pos_embed='none'; CLS/register tokens)",
    "timm.models.deit.VisionTransformerDistilled (DeiT distilled: CLS and distillation tokens)",
    "timm.models.eva.Eva (EVA/EVA02, *_rope_* and DINOv3 ViTs: APE, axial RoPE, mixed RoPE, DINOv3 RoPE)",
)
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def _require_timm() -> Any:
    """The ``timm`` module, or a PeanchorError saying how to install it."""
    try:
        import timm
    except ModuleNotFoundError as e:
        if e.name != "timm":
            raise PeanchorError(f"timm could not be imported: {e}") from e
        raise PeanchorError("timm is not installed: pip install 'peanchor[timm]'") from e
    return timm


@contextmanager
def _hub_offline() -> Iterator[None]:
    """Belt and braces around timm: nothing here may reach the Hugging Face Hub.

    We always pass ``pretrained=False``, so timm never asks for weights; the variables only guard
    against a future code path that would. They are restored afterwards. Note that
    ``huggingface_hub`` reads them once, when it is first imported: if that first import happens
    inside this block (``import timm`` imports it), the hub stays offline for the process.
    """
    saved = {k: os.environ.get(k) for k in _OFFLINE_VARS}
    os.environ.update({k: "1" for k in _OFFLINE_VARS})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------------------------------
# The wrapper


@dataclass(frozen=True)
class TimmPE:
    """What the analysis needs to know about a timm model's positional encoding (``model.pe``)."""

    name: str
    scalable: bool
    has_ape: bool
    rope: str | None  # "rope", "rope_mixed", "rope_dinov3" or None


class TimmViT(AnalysisInterface, nn.Module):
    """A timm ViT behind peanchor's analysis interface. ``self.model`` is the unchanged timm model.

    Build it with :func:`load_timm_model`, or wrap a model you already have: ``TimmViT(timm_model)``.
    Analysis is meant for eval mode; in training mode the forward still matches timm's, except that
    patch dropout (which removes tokens) is refused.
    """

    can_restrict_classes = True

    def __init__(self, model: nn.Module, *, model_args: dict[str, Any] | None = None):
        super().__init__()
        timm = _require_timm()
        from timm.models.deit import VisionTransformerDistilled
        from timm.models.eva import Eva, EvaBlock
        from timm.models.vision_transformer import Block, ParallelScalingBlock, VisionTransformer

        families = {VisionTransformer: "vit", VisionTransformerDistilled: "vit", Eva: "eva"}
        family = families.get(type(model))
        if family is None:
            raise ConfigError(
                f"timm model class {type(model).__module__}.{type(model).__name__} is not supported; "
                f"supported: {'; '.join(SUPPORTED_FAMILIES)}"
            )
        if getattr(model, "dist_token", None) is not None and model.reg_token is not None:  # timm's forward drops them
            raise ConfigError("a distilled timm ViT with register tokens is not supported")
        # The norm whose output each block's attention sees (the SSDC probe point), per block class.
        probe_norms: dict[type, str] = (
            {Block: "norm1", ParallelScalingBlock: "in_norm"} if family == "vit" else {EvaBlock: "norm1"}
        )
        for i, block in enumerate(model.blocks):
            if type(block) not in probe_norms:
                raise ConfigError(
                    f"block {i} of this timm model is a {type(block).__name__}; supported blocks (pre-norm): "
                    f"{', '.join(c.__name__ for c in probe_norms)}"
                )
        rope = getattr(model, "rope", None) if family == "eva" else None
        rope_name = None
        self._rope_builder: RopeBuilder | None = None
        if rope is not None:
            kinds = rope_kinds()
            if type(rope) not in kinds:
                raise ConfigError(
                    f"timm rotary embedding {type(rope).__name__} is not supported; "
                    f"supported: {', '.join(c.__name__ for c in kinds)}"
                )
            rope_name, self._rope_builder = kinds[type(rope)]
        self.model = model
        self.family = family
        self._probe_attr = [probe_norms[type(b)] for b in model.blocks]
        self._attention = attention_modules(model.blocks)  # None: this model's weights cannot be had
        has_ape = model.pos_embed is not None
        name = "_".join(p for p in (rope_name, "ape" if has_ape else None) if p) or "none"
        self._pe = TimmPE(name=f"timm:{name}", scalable=has_ape or rope is not None, has_ape=has_ape, rope=rope_name)
        self._model_args = dict(model_args) if model_args is not None else _describe(model, timm.__version__)
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
        """One pass under ``intervention`` (see :class:`~peanchor.models.interface.AnalysisInterface`), through timm's own
        modules."""
        count = self._layer_count(layers, head)
        first = self._first_block(start, attention)
        m = self.model
        run = self._bind(images, intervention, start)  # None: the plain pass
        if first:
            assert start is not None and start.residual is not None  # Start checks both
            x = start.residual  # (B, P + N, D): the stream entering block `first`
        else:
            x = self._embedded(images, intervention, run)  # (B, P + N, D)
        grid = run.grid if run is not None else self.grid
        if self._rope_builder is not None and any(getattr(e, "rope_positions", None) == "interpolate" for e in
                                                  intervention.edits):  # fmt: skip
            raise ConfigError("pe_resample:rope_positions=interpolate is for peanchor's RoPE; timm builds its rotary "
                              "table for another grid itself (rope.get_embed), so leave it at extrapolate")  # fmt: skip
        rope = self._rope(intervention.pe_scale, *([grid] if grid != self.grid else []))  # (N, 2hd), (L, H, N, 2hd)
        per_block = bool(getattr(m, "rope_mixed", False)) and rope is not None
        if run is not None and run.acts_at("rope.tables"):
            assert rope is not None  # rope.tables is a hook point of a model with a rope only
            rope = join_rope(run.rope(RopeTables(*split_rope(rope), run.hooks.planes)))  # (L|1, H|1, N, 2hd)
            per_block = True
        probes: list[Tensor] = start.probes_before(count) if start is not None else []
        weights = capture_attention(self._attention or [], attention)  # timm's eager path while a sink listens
        sites = site_hooks(m.blocks, run, run.hooks.num_heads) if run is not None else contextlib.nullcontext()
        norms = [self._probe_norm(i) for i in range(first, count)]
        with capture_probes(norms, probes, self.num_prefix), weights, sites:
            for i, block in enumerate(m.blocks):
                if i < first:
                    continue
                if not head and i >= count - 1:
                    if i == count - 1:
                        self._probe_norm(i)(x)  # the last probe needs no attention/MLP; the hook records it
                    break
                if self.family == "vit":
                    x = block(x)
                else:
                    x = block(x, rope=rope[i if rope.shape[0] > 1 else 0] if per_block else rope)
                if len(probes) != min(i + 1, count):
                    raise RuntimeError(f"block {i} ran its probe norm {len(probes) - i} times; expected once")
                if run is not None and run.acts_on_block("residual", i):
                    x = run.block("residual", i, x)
        tokens = torch.stack(probes, dim=1) if probes else None  # (B, L, N, D)
        logits = m.forward_head(m.norm(x)) if head else None  # (B, C)
        if logits is not None and self.logit_subset is not None:
            logits = logits[:, self.logit_subset.to(logits.device)]  # (B, C_subset)
        return Intermediates(logits, tokens)

    def _embedded(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
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


def _jsonable(value: Any) -> Any:
    try:
        return json.dumps(value) and value
    except (TypeError, ValueError):
        return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else repr(value)


def _size_arg(model: nn.Module) -> int | list[int] | None:
    """The model's input size as ``create_model(img_size=...)`` takes it: an int when square (None: no patch
    embedding, a model :class:`TimmViT` then refuses with the classes it supports)."""
    if not hasattr(model, "patch_embed"):
        return None
    rows, cols = (int(s) for s in model.patch_embed.img_size)
    return rows if rows == cols else [rows, cols]


def _describe(model: nn.Module, timm_version: str) -> dict[str, Any]:
    """Provenance of a model that was not built by :func:`load_timm_model`."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return {
        "source": "timm", "name": cfg.get("architecture", type(model).__name__), "weights": None,
        "num_classes": int(getattr(model, "num_classes", 0)), "img_size": _size_arg(model), "kwargs": {},
        "timm_version": timm_version,
    }  # fmt: skip


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The tensors of a local timm weights file (:data:`WEIGHT_SUFFIXES`), bare or nested; nothing but tensors
    and containers is unpickled (see :func:`peanchor.weights.read_state_dict`)."""
    p = Path(path)
    if p.exists() and p.suffix.lower() not in WEIGHT_SUFFIXES:
        raise CheckpointError(f"{p}: unknown weights format {p.suffix!r}; expected one of {', '.join(WEIGHT_SUFFIXES)}")
    return read_weights_file(p)


def load_timm_model(
    name: str,
    *,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
    img_size: int | None = None,
    **kwargs: Any,
) -> TimmViT:
    """Build timm model ``name`` (never downloading), load local ``weights`` and wrap it.

    ``num_classes`` defaults to the rows of ``head.weight`` in ``weights`` (else timm's default); ``img_size`` and
    ``kwargs`` (e.g. ``depth``, ``embed_dim``, ``pos_embed='none'``) go to ``timm.create_model``. Weights load
    strictly: a missing file, an unsafe pickle, or keys/shapes that do not fit raise :class:`CheckpointError`.

    Returns:
        The :class:`TimmViT` wrapping the model, in eval mode.

    Examples:
        ```python
        m = load_timm_model("vit_small_patch16_rope_mixed_224", img_size=32, patch_size=8, depth=2, num_classes=10)
        ```
    """
    with _hub_offline():
        timm = _require_timm()
        if not timm.is_model(name):
            close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
            raise ConfigError(
                f"unknown timm model {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
            )
        sd = path = None
        if weights is not None:
            path = Path(weights)
            sd = read_state_dict(path)
            if num_classes is None and "head.weight" in sd and sd["head.weight"].dim() == 2:
                num_classes = int(sd["head.weight"].shape[0])
        create_kwargs = dict(kwargs)
        if num_classes is not None:
            create_kwargs["num_classes"] = num_classes
        if img_size is not None:
            create_kwargs["img_size"] = img_size
        try:
            model = timm.create_model(name, pretrained=False, **create_kwargs)
        except (TypeError, ValueError, AssertionError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"timm model {name!r} rejected its arguments: {first}") from e
    model_args = {
        "source": "timm",
        "name": name,
        "weights": str(path) if path is not None else None,
        "num_classes": int(getattr(model, "num_classes", num_classes or 0)),
        "img_size": _size_arg(model),
        "kwargs": {k: _jsonable(v) for k, v in kwargs.items()},
        "timm_version": timm.__version__,
    }
    wrapped = TimmViT(model, model_args=model_args)
    if sd is not None:
        headless = "head.weight" in model.state_dict() and not any(k.startswith("head.") for k in sd)
        hint = " (a headless checkpoint: pass num_classes=0)" if headless else ""
        load_strict(model, sd, f"{path} does not fit timm model {name!r}", hint)
    return wrapped.eval()
