"""Run peanchor's analysis on Hugging Face ``transformers`` vision transformers, through their own forward.

:class:`HFViT` wraps a transformers model and offers the probe interface of
:class:`peanchor.models.interface.AnalysisInterface` (``forward(images, token_perm, pe_scale)``, ``spatial_tokens``,
``forward_with_tokens``, ``attention_maps``, ``grid``, ``depth``, ``num_prefix``, ``pe_name``, ``pe_scalable``, ...).
Unlike the timm adapter it does not re-orchestrate the forward: every pass is the model's own ``forward``, and the
interventions are hooks and temporary swaps that are undone when the pass ends:

* RPI: a forward hook on the patch embedding reorders its output's token axis, i.e. right after patch embedding
  and before any position embedding is added, so the table stays attached to the slots (docs/study.md);
* α on a learned table: the table parameter (``position_embeddings``, or ``position_embedding.weight``) is
  replaced by α × table for the pass (transformers' bicubic ``interpolate_pos_encoding`` is linear, so an
  interpolated table is scaled by α too); α on DINOv3's RoPE: its ``inv_freq`` buffer is replaced by
  α × ``inv_freq``, which multiplies every rotation angle by α (α = 0: no rotation), as the timm adapter does;
* the SSDC probe: forward hooks on each layer's first norm, prefix tokens (CLS, distillation, registers) dropped;
  a truncated pass (``num_layers``) stops the forward once the last probe needed is recorded;
* attention weights: the pass runs transformers' eager attention path, whose attention modules return their
  softmax weights; a forward hook hands them to the sink.

With the identity permutation (or none) and α = 1 nothing changes the computation, so logits and hidden states
are transformers' own (tests/adapters/test_hf_vit.py checks this on small random configs of every family). A model with
no classification head (``Dinov2Model``, ``CLIPVisionModel``, ...) returns its pooled features from ``forward``
and says ``has_head = False``; :func:`peanchor.api.analysis.analyze` then reports no accuracy for it.

Imports: torch, transformers (lazily); :mod:`peanchor.adapters` (backend, hf_families, hf_hooks, hf_bias),
:mod:`peanchor.models.interface`, :mod:`peanchor.interventions`, :mod:`peanchor.audit` (the subject).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, ExitStack, contextmanager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.hf_bias import beit_observer, bias_modules, edited_bias, scaled_bias
from peanchor.adapters.hf_families import FAMILIES, SUPPORTED_CLASSES
from peanchor.adapters.hf_hooks import (StopPass, attention_hooks, edited_rope, edited_table, permuted_patches,
                                        probe_hooks, rope_planes, site_hooks, started_layers, table_of)
from peanchor.core.errors import ConfigError, PeanchorError
from peanchor.interventions import BLOCK_SITES, NO_INTERVENTION, HookPoints, Intervention, Start
from peanchor.interventions.edit import check_grid
from peanchor.models.interface import AnalysisInterface, AttentionSink, Intermediates

__all__ = ["HFViT", "SUPPORTED_CLASSES", "TransformersBackend", "is_transformers_model"]


def require_transformers() -> Any:
    try:
        import transformers
    except ModuleNotFoundError as e:
        if e.name != "transformers":
            raise PeanchorError(f"transformers could not be imported: {e}") from e
        raise PeanchorError("transformers is not installed: pip install 'peanchor[transformers]'") from e
    return transformers


def is_transformers_model(model: Any) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (without importing transformers if it is not)."""
    mro = type(model).__mro__
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel" for c in mro)


def _supported_line() -> str:
    return ", ".join(SUPPORTED_CLASSES)


def _attr(module: nn.Module, dotted: str) -> Any:
    for part in dotted.split(".") if dotted else ():
        module = getattr(module, part)
    return module


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (tuple, list)) else (int(value), int(value))


class HFViT(AnalysisInterface, nn.Module):
    """A transformers vision transformer behind peanchor's analysis interface; ``self.model`` is unchanged.

    ``img_size`` (default: the config's) is the resolution the analysis feeds; at another size than the config's
    the model's own ``interpolate_pos_encoding`` resizes the table (DINOv2 and DINOv3 always adapt to the input).
    ``mean``/``std`` (default: the family's usual ones, those of its published
    checkpoints' ``preprocessor_config.json``: ImageNet's for DeiT and DINOv2/v3, 0.5 for ViT and SigLIP, OpenAI's
    for CLIP) normalise the uint8 images.
    """

    def __init__(
        self,
        model: nn.Module,
        *,
        img_size: int | None = None,
        mean: tuple[float, ...] | None = None,
        std: tuple[float, ...] | None = None,
    ):
        super().__init__()
        transformers = require_transformers()
        name = type(model).__name__
        if not is_transformers_model(model) or name not in SUPPORTED_CLASSES:
            raise ConfigError(f"transformers model class {name} is not supported; supported: {_supported_line()}")
        family_name, backbone_attr = SUPPORTED_CLASSES[name]
        self.family = FAMILIES[family_name]
        self.model = model
        self._backbone: nn.Module = _attr(model, backbone_attr)
        config = self._backbone.config
        self._patch = _pair(config.patch_size)
        native = _pair(config.image_size)
        size = (int(img_size), int(img_size)) if img_size is not None else native
        if size[0] % self._patch[0] or size[1] % self._patch[1]:
            raise ConfigError(f"img_size {size[0]} is not a multiple of the model's patch size {self._patch[0]}")
        self._img_size = size
        self._interpolate = size != native
        self._layers: nn.ModuleList = _attr(self._backbone, self.family.layers)
        self._prefix = self.family.extra_prefix + int(getattr(config, "num_register_tokens", 0) or 0)
        self.mean = tuple(mean) if mean is not None else self.family.norm_stats[0]
        self.std = tuple(std) if std is not None else self.family.norm_stats[1]
        self._classifier = "ForImageClassification" in name  # a backbone (Dinov2Model, ...) has no head
        self.logit_subset: Tensor | None = None  # see restrict_to_classes
        self._model_args = {
            "source": "transformers", "class": name, "img_size": size[0], "num_classes": self.num_classes,
            "transformers_version": transformers.__version__,
        }  # fmt: skip

    can_restrict_classes = True

    def restrict_to_classes(self, indices: list[int]) -> None:
        """Keep only these output classes, in this order (e.g. ImageNet-100 inside an ImageNet-1k head)."""
        self.logit_subset = torch.as_tensor(indices, dtype=torch.long)

    # ---- what the analysis reads ------------------------------------------------------------

    @property
    def pe_name(self) -> str:
        if self.has_bias:
            return "hf:rel_bias_ape" if self.has_table else "hf:rel_bias"
        if self.family.bias and not self.has_table:  # a BEiT configured with neither bias nor table
            return "hf:none"
        return "hf:rope" if self.family.rope else "hf:ape"

    @property
    def pe_scalable(self) -> bool:
        return self.pe_name != "hf:none"  # every other has a learned table, a rope or a relative bias

    @property
    def has_bias(self) -> bool:
        """Whether the model has a relative position bias (BEiT's is optional: shared, per layer or none)."""
        if not self.family.bias:
            return False
        shared, own = bias_modules(self._backbone, self._layers)
        return shared is not None or any(m is not None for m in own)

    @property
    def has_table(self) -> bool:
        """Whether the model has a learned absolute table (BEiT's is optional)."""
        table = self.family.table
        return table is not None and getattr(_attr(self._backbone, table[0]), table[1], None) is not None

    @property
    def has_attention_weights(self) -> bool:  # type: ignore[override]
        return True

    @property
    def grid(self) -> tuple[int, int]:
        return self._img_size[0] // self._patch[0], self._img_size[1] // self._patch[1]

    @property
    def depth(self) -> int:  # type: ignore[override]
        return len(self._layers)

    @property
    def num_prefix(self) -> int:  # type: ignore[override]
        """Tokens in front of the patches (CLS, DeiT's distillation token, registers), dropped from the probes."""
        return self._prefix

    @property
    def img_size(self) -> tuple[int, int]:
        return self._img_size

    @property
    def num_classes(self) -> int:
        return int(self.model.config.num_labels) if self._classifier else 0

    @property
    def model_args(self) -> dict[str, Any]:
        """Provenance (JSON-able): the class, the resolution analysed and the transformers version."""
        return dict(self._model_args)

    def extra_repr(self) -> str:
        name = type(self.model).__name__
        return f"class={name}, pe={self.pe_name}, grid={self.grid}, depth={self.depth}, prefix={self.num_prefix}"

    @property
    def hook_points(self) -> HookPoints:
        points = {f"blocks.{{k}}.{site}" for site in BLOCK_SITES}
        planes: tuple = ()
        if self.has_table and not self._interpolate:
            points |= {"pe.table"} if self.family.bias else {"pe.table", "input.grid"}  # BEiT: no pe_resample
        if self.has_bias:
            points.add("pe.bias")
        if self.family.rope is not None:
            rope = _attr(self._backbone, self.family.rope)
            cos, sin = rope(torch.zeros(1, 3, *self._img_size, device=rope.inv_freq.device))  # (N, hd) each
            points.add("rope.tables")
            planes = rope_planes(cos, sin, self.grid, rope.inv_freq)
        heads = int(self._backbone.config.num_attention_heads)
        return HookPoints(f"hf:{self.family.name}", frozenset(points), self.depth, heads, self.grid, self._prefix,
                          planes)  # fmt: skip

    # ---- interventions, as hooks and swaps undone after the pass ----------------------------

    @contextmanager
    def _scaled(self, alpha: float, table_only: bool = False) -> Iterator[None]:
        """The table (or the rope's ``inv_freq``, or BEiT's bias tables and table) × α for the pass; the original
        tensors are put back after."""
        if alpha == 1.0 or (table_only and not self.has_table):
            yield
            return
        if self.family.bias and not table_only:
            with self._scaled_bias(alpha), self._scaled(alpha, table_only=True):
                yield
            return
        if self.has_table:
            owner, key, store = _attr(self._backbone, self.family.table[0]), self.family.table[1], "_parameters"
        else:
            owner, key, store = _attr(self._backbone, self.family.rope or ""), "inv_freq", "_buffers"
        slots = getattr(owner, store)
        original = slots[key]
        slots[key] = original.detach() * alpha  # a plain tensor in the slot: forward reads it like the original
        try:
            yield
        finally:
            slots[key] = original

    def _scaled_bias(self, alpha: float) -> AbstractContextManager[None]:
        """BEiT's bias tables × α for the pass (a no-op for a family without a bias)."""
        if not self.family.bias or alpha == 1.0:
            return nullcontext()
        shared, own = bias_modules(self._backbone, self._layers)
        return scaled_bias([m for m in (shared, *own) if m is not None], alpha)

    # ---- the forward pass ---------------------------------------------------------------------

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
        """One pass under ``intervention`` (see :class:`~peanchor.models.interface.AnalysisInterface`), through the
        model's own forward with hooks. A pass with ``start`` still runs the embeddings (their output is replaced),
        not the layers before ``start.layer``."""
        count = self._layer_count(layers, head)
        first = self._first_block(start, attention)
        run = self._bind(images, intervention, start)  # None: the plain pass
        if run is None and tuple(images.shape[-2:]) != self._img_size:
            raise ValueError(
                f"images are {images.shape[-2]}x{images.shape[-1]} px but this wrapper analyses "
                f"{self._img_size[0]}x{self._img_size[1]} px (HFViT(model, img_size=...) sets it)"
            )
        if run is not None:
            check_grid(images, run.grid, self._patch)
        probes: list[Tensor] = start.probes_before(count) if start is not None else []
        if not head and count <= first:  # every probe is the earlier pass's
            return Intermediates(None, torch.stack(probes, dim=1))
        kwargs = {"interpolate_pos_encoding": True} if self._interpolate and self.family.interpolate_kwarg else {}
        table = run is not None and run.acts_at("pe.table")
        out = None
        with ExitStack() as stack:
            stack.enter_context(permuted_patches(_attr(self._backbone, self.family.patch), intervention.token_perm))
            if table:
                assert run is not None and self.family.table is not None
                stack.enter_context(self._scaled_bias(float(intervention.pe_scale)))  # BEiT's, beside its table
                owner, key = _attr(self._backbone, self.family.table[0]), self.family.table[1]
                rows = table_of(getattr(owner, key), self.num_patches, self.grid, float(intervention.pe_scale))
                stack.enter_context(edited_table(self._backbone.embeddings, run.table(rows)))
                kwargs = {"interpolate_pos_encoding": True} if self.family.interpolate_kwarg else {}
            else:
                stack.enter_context(self._scaled(float(intervention.pe_scale)))
            if run is not None and run.acts_at("pe.bias"):
                stack.enter_context(edited_bias(self._backbone, self._layers, run, self.grid))
            if run is not None and run.acts_at("rope.tables"):
                stack.enter_context(edited_rope(_attr(self._backbone, self.family.rope or ""), self._layers, run))
            if run is not None:
                stack.enter_context(site_hooks(self._layers, self.family.attention, self.family.out_proj, run,
                                               run.hooks.num_heads))  # fmt: skip
            norms = [getattr(layer, self.family.norm) for layer in self._layers[first:count]]
            stack.enter_context(probe_hooks(norms, probes, self._prefix, count if not head else None))
            stack.enter_context(attention_hooks(self.model, self._layers, self.family.attention, attention))
            if first:
                assert start is not None and start.residual is not None  # Start checks both
                stack.enter_context(started_layers(self._backbone, self.family.layers, first, start.residual))
            try:
                out = self.model(pixel_values=images, **kwargs)
            except StopPass:
                pass
        if len(probes) != count:  # each layer's first norm runs once per pass
            raise RuntimeError(f"{len(probes)} probe outputs from a pass over {count} layers")
        tokens = torch.stack(probes, dim=1) if probes else None  # (B, L, N, D)
        if not head:
            return Intermediates(None, tokens)
        assert out is not None
        return Intermediates(self._head_output(out), tokens)

    def _head_output(self, out: Any) -> Tensor:
        """Logits ``(B, C)``; for a model without a classification head, its pooled features ``(B, D)``."""
        if self.has_head:
            logits = out.logits  # (B, C)
            return logits if self.logit_subset is None else logits[:, self.logit_subset.to(logits.device)]
        pooled = getattr(out, "pooler_output", None)
        return pooled if pooled is not None else out.last_hidden_state.mean(dim=1)


@BACKENDS.register
class TransformersBackend(Backend):
    """transformers' vision transformers of :data:`SUPPORTED_CLASSES` (any other transformers model is refused by
    :class:`HFViT` with the classes it supports)."""

    name = "transformers"
    summary = "a transformers vision model (" + ", ".join(sorted({f.split("For")[0] for f in SUPPORTED_CLASSES})) + ")"

    def accepts(self, model: Any) -> bool:
        return is_transformers_model(model)

    def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict[str, Any] | None = None) -> Any:
        return HFViT(model, img_size=img_size).train(model.training)

    def wraps(self, wrapped: Any) -> bool:
        return isinstance(wrapped, HFViT)

    def audit_subject(self, wrapped: Any) -> Any:
        """The claim read off the family and the config, the model's own forward, and its own
        ``interpolate_pos_encoding`` beside ``pe_resample``."""
        from peanchor.audit.adapters import own_path
        from peanchor.audit.observe import HFObserver
        from peanchor.audit.subject import AuditSubject

        family = wrapped.family

        def native(images: Tensor, **kwargs: Any) -> Tensor:
            out = wrapped.model(pixel_values=images, **kwargs)
            return out.logits if wrapped.has_head else out.pooler_output

        subject = AuditSubject(wrapped, wrapped.pe_name.replace("hf:", f"hf:{family.name}:"), "transformers",
                               _claim(wrapped), wrapped.img_size[0] // wrapped.grid[0], wrapped.pe_scalable, None,
                               wrapped.has_bias, native,
                               observer=beit_observer(wrapped) if family.bias else HFObserver(wrapped))  # fmt: skip
        if family.table is not None and "input.grid" in wrapped.hook_points.points:
            kwargs = {"interpolate_pos_encoding": True} if family.interpolate_kwarg else {}
            # transformers 5 antialiases in DINOv2 with registers only (docs/interventions.md)
            antialias = family.name == "dinov2_with_registers"
            subject.own_resample = lambda: own_path(subject, lambda x: native(x, **kwargs), "bicubic", antialias)
        return subject


    def signature(self, wrapped: Any) -> str:
        cfg = wrapped.model.config
        said = f"{wrapped.family.name} registers={int(getattr(cfg, 'num_register_tokens', 0) or 0)}"
        if wrapped.family.bias:
            said += (f" shared_bias={bool(cfg.use_shared_relative_position_bias)} "
                     f"layer_bias={bool(cfg.use_relative_position_bias)} table={wrapped.has_table}")  # fmt: skip
        return said


def _claim(wrapped: HFViT) -> Any:
    """What the family and the config say the PE is."""
    from peanchor.audit.subject import Claim

    family, config = wrapped.family, wrapped.model.config
    registers = int(getattr(config, "num_register_tokens", 0) or 0)
    prefix = family.extra_prefix + registers
    if family.rope is not None:
        said = f"transformers {family.name}: rope, {registers} registers"
        return Claim("rotary", "dinov3", None, prefix, source=said)
    if family.bias:
        shared = "a shared" if getattr(config, "use_shared_relative_position_bias", False) else "per-layer"
        shared = shared if wrapped.has_bias else "no"
        table = wrapped.has_table
        kind = "relative bias" if wrapped.has_bias else "learned table" if table else "none"
        return Claim(kind, None, family.extra_prefix if table else None, prefix,
                     source=f"transformers {family.name}: {shared} relative position bias, "
                     f"absolute table={'yes' if table else 'no'}",
                     also=("learned table",) if table and wrapped.has_bias else ())  # fmt: skip
    return Claim("learned table", None, family.extra_prefix, prefix,
                 source=f"transformers {family.name}: a learned table, {registers} registers")  # fmt: skip
