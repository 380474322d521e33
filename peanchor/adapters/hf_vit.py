"""The transformers backend: a transformers vision transformer behind the analysis interface, on the one template
pass (:class:`~peanchor.models.template.TemplatePass`), each step through the model's own code. ``self.model``
stays as it is; a pass changes hooks and swaps (:mod:`peanchor.adapters.hf_hooks`) undone after each step.

* ``_embed``: the model's own forward up to its first layer (:mod:`peanchor.adapters.hf_split`): its embeddings
  (and CLIP's pre-norm), the patches moved (RPI) by a hook on the patch embedding before any position is added, the
  learned table × α (interpolated too: transformers' bicubic interpolation is linear) or edited at ``pe.table``;
* ``_blocks``: each layer called with what the encoder hands every layer (DINOv3's rotary ``(cos, sin)``, BEiT's
  shared bias, the masks), read off the model's own forward at the pass's grid with DINOv3's ``inv_freq`` or
  BEiT's bias tables × α, edited at ``rope.tables`` / ``pe.bias``; the probe, the edits' block sites and the
  attention weights (transformers' eager path) are hooks on the layers' modules;
* ``_head``: the model's own forward from the last layer's output on (final norm, pooler, classifier, DeiT's two
  heads, SigLIP's pooling head). A model without a classification head (``Dinov2Model``, ...) returns its pooled
  features and says ``has_head = False``.

In training mode DINOv3's rope draws its coordinate augmentation in each of the pass's three calls of the model
(the layers get the second draw), so a training-mode pass does not follow the model's own random stream; the
analysis runs in eval mode. The audit subject is :mod:`peanchor.adapters.hf_audit`'s.

Imports: torch, transformers (lazily); :mod:`peanchor.adapters` (backend, hf_audit, hf_bias, hf_families, hf_hooks,
hf_split), :mod:`peanchor.models` (interface, template), :mod:`peanchor.interventions`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.adapters import hf_audit
from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.hf_bias import bias_modules, edited_bias, scaled_bias
from peanchor.adapters.hf_families import FAMILIES, SUPPORTED_CLASSES, part, pe_parts
from peanchor.adapters.hf_hooks import (attention_hooks, edited_rope, edited_table, permuted_patches, probe_hooks,
                                        rope_planes, scaled_slot, site_hooks, table_of)  # fmt: skip
from peanchor.adapters.hf_split import first_layer_input, from_last_layer
from peanchor.core.errors import ConfigError
from peanchor.interventions import BLOCK_SITES, EditPass, HookPoints, Intervention
from peanchor.interventions.edit import check_grid
from peanchor.models.interface import AttentionSink
from peanchor.models.template import BlockStep, TemplatePass

__all__ = ["HFViT", "SUPPORTED_CLASSES", "TransformersBackend", "is_transformers_model"]


def is_transformers_model(model: Any) -> bool:
    """Whether ``model`` is a transformers ``PreTrainedModel`` (without importing transformers if it is not)."""
    mro = type(model).__mro__
    return any(c.__module__.startswith("transformers.") and c.__name__ == "PreTrainedModel" for c in mro)


def _pair(value: Any) -> tuple[int, int]:
    return (int(value[0]), int(value[1])) if isinstance(value, (tuple, list)) else (int(value), int(value))


class HFViT(TemplatePass, nn.Module):
    """A transformers vision transformer behind peanchor's analysis interface; ``self.model`` is unchanged.

    ``img_size`` (default: the config's) is the resolution the analysis feeds; at another size than the config's
    the model's own ``interpolate_pos_encoding`` resizes the table (DINOv2 and DINOv3 always adapt to the input).
    ``mean``/``std`` (default: the family's usual ones, those of its published checkpoints'
    ``preprocessor_config.json``: ImageNet's for DeiT and DINOv2/v3, 0.5 for ViT and SigLIP, OpenAI's for CLIP)
    normalise the uint8 images.
    """

    can_restrict_classes = True
    has_attention_weights = True  # type: ignore[assignment]  # transformers' eager attention returns them

    def __init__(self, model: nn.Module, *, img_size: int | None = None, mean: tuple[float, ...] | None = None,
                 std: tuple[float, ...] | None = None):  # fmt: skip
        super().__init__()
        name = type(model).__name__
        if not is_transformers_model(model) or name not in SUPPORTED_CLASSES:
            raise ConfigError(f"transformers model class {name} is not supported; supported: "
                              + ", ".join(SUPPORTED_CLASSES))  # fmt: skip
        import transformers  # imported already: the model is one of its classes
        family_name, backbone_attr = SUPPORTED_CLASSES[name]
        self.family = FAMILIES[family_name]
        self.model = model
        self._backbone: nn.Module = part(model, backbone_attr)
        config = self._backbone.config
        self._patch = _pair(config.patch_size)
        native = _pair(config.image_size)
        size = (int(img_size), int(img_size)) if img_size is not None else native
        if size[0] % self._patch[0] or size[1] % self._patch[1]:
            raise ConfigError(f"img_size {size[0]} is not a multiple of the model's patch size {self._patch[0]}")
        self._img_size = size
        self._interpolate = size != native
        self._layers: nn.ModuleList = part(self._backbone, self.family.layers)
        self._prefix = self.family.extra_prefix + int(getattr(config, "num_register_tokens", 0) or 0)
        self.mean = tuple(mean) if mean is not None else self.family.norm_stats[0]
        self.std = tuple(std) if std is not None else self.family.norm_stats[1]
        self._classifier = "ForImageClassification" in name  # a backbone (Dinov2Model, ...) has no head
        self.logit_subset: Tensor | None = None  # see restrict_to_classes
        self._model_args = {"source": "transformers", "class": name, "img_size": size[0],
                            "num_classes": self.num_classes, "transformers_version": transformers.__version__}

    def restrict_to_classes(self, indices: list[int]) -> None:
        """Keep only these output classes, in this order (e.g. ImageNet-100 inside an ImageNet-1k head)."""
        self.logit_subset = torch.as_tensor(indices, dtype=torch.long)

    # ---- what the analysis reads ------------------------------------------------------------

    @property
    def pe_name(self) -> str:
        return pe_parts(self.family, self._backbone).name

    @property
    def pe_scalable(self) -> bool:
        return self.pe_name != "hf:none"  # every other has a learned table, a rope or a relative bias

    @property
    def has_table(self) -> bool:
        """Whether the model has a learned absolute table (BEiT's is optional)."""
        return pe_parts(self.family, self._backbone).table

    @property
    def has_bias(self) -> bool:
        """Whether the model has a relative position bias (BEiT's is optional: shared, per layer or none)."""
        return pe_parts(self.family, self._backbone).bias

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
            rope = part(self._backbone, self.family.rope)
            cos, sin = rope(torch.zeros(1, 3, *self._img_size, device=rope.inv_freq.device))  # (N, hd) each
            points.add("rope.tables")
            planes = rope_planes(cos, sin, self.grid, rope.inv_freq)
        heads = int(self._backbone.config.num_attention_heads)
        return HookPoints(f"hf:{self.family.name}", frozenset(points), self.depth, heads, self.grid, self.num_prefix,
                          planes)  # fmt: skip

    # ---- the steps of the template pass -------------------------------------------------------

    def _embed(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
        if run is not None:
            check_grid(images, run.grid, self._patch)
        elif tuple(images.shape[-2:]) != self._img_size:
            raise ValueError(f"images are {images.shape[-2]}x{images.shape[-1]} px but this wrapper analyses "
                             f"{self._img_size[0]}x{self._img_size[1]} px (HFViT(model, img_size=...) sets it)")
        interpolate = self._interpolate
        alpha = float(intervention.pe_scale)
        with ExitStack() as stack:
            stack.enter_context(permuted_patches(part(self._backbone, self.family.patch), intervention.token_perm))
            if run is not None and run.acts_at("pe.table"):
                rows = table_of(self._table_owner()[2], self.num_patches, self.grid, alpha)
                stack.enter_context(edited_table(self._backbone.embeddings, run.table(rows)))
                interpolate = True  # the embeddings add the edited table at whatever grid the images give
            elif self.has_table and alpha != 1.0:
                owner, key, _ = self._table_owner()
                stack.enter_context(scaled_slot(owner, "_parameters", key, alpha))
            kwargs = {"interpolate_pos_encoding": True} if interpolate and self.family.interpolate_kwarg else {}
            return first_layer_input(self.model, self._backbone, self.family.layers, images, **kwargs).hidden

    @contextmanager
    def _blocks(self, intervention: Intervention, run: EditPass | None,
                attention: AttentionSink | None) -> Iterator[BlockStep]:  # fmt: skip
        layers, family = self._layers, self.family
        seen: list[Tensor] = []
        with ExitStack() as stack:
            stack.enter_context(self._scaled_code(float(intervention.pe_scale)))
            if run is not None and run.acts_at("pe.bias"):
                stack.enter_context(edited_bias(self._backbone, layers, run, self.grid))
            if run is not None:
                stack.enter_context(site_hooks(layers, family.attention, family.out_proj, run, run.hooks.num_heads))
            stack.enter_context(probe_hooks([getattr(layer, family.norm) for layer in layers], seen))
            stack.enter_context(attention_hooks(self.model, layers, family.attention, attention))
            arguments: Callable[[int], tuple[tuple, dict[str, Any]]] | None = None  # read at the first step

            def step(i: int, x: Tensor) -> tuple[Tensor, Tensor]:
                nonlocal arguments
                if arguments is None:
                    arguments = self._arguments(x, run)
                args, kwargs = arguments(i)
                seen.clear()
                out = layers[i](x, *args, **kwargs)
                if len(seen) != 1:
                    raise RuntimeError(f"layer {i} ran its first norm {len(seen)} times; expected once")
                return (out[0] if isinstance(out, tuple) else out), seen[0]  # (B, P + N, D) each

            yield step

    def _probe(self, index: int, x: Tensor) -> Tensor:
        return getattr(self._layers[index], self.family.norm)(x)  # (B, P + N, D)

    def _head(self, x: Tensor) -> Tensor:
        """Logits ``(B, C)``; for a model without a classification head, its pooled features ``(B, D)``."""
        out = from_last_layer(self.model, self._backbone, self.family.layers, x, self._img_size)
        if self.has_head:
            logits = out.logits  # (B, C)
            return logits if self.logit_subset is None else logits[:, self.logit_subset.to(logits.device)]
        pooled = getattr(out, "pooler_output", None)
        return pooled if pooled is not None else out.last_hidden_state.mean(dim=1)

    # ---- what the steps share -------------------------------------------------------------------

    def _arguments(self, x: Tensor, run: EditPass | None) -> Callable[[int], tuple[tuple, dict[str, Any]]]:
        """What the encoder hands layer ``i`` in this pass besides the stream, read off its forward at the pass's
        grid with the embeddings handing on ``x`` ``(B, P + N, D)``; an edit at ``rope.tables`` edits DINOv3's."""
        grid = run.grid if run is not None else self.grid
        stand_in = x.new_zeros(()).expand(x.shape[0], 3, grid[0] * self._patch[0], grid[1] * self._patch[1])
        given = first_layer_input(self.model, self._backbone, self.family.layers, stand_in, embedded=x)
        if run is None or not run.acts_at("rope.tables"):
            return lambda i: (given.args, given.kwargs)
        ropes = edited_rope(given.kwargs["position_embeddings"], run)  # one (cos, sin) per layer, or one for all
        return lambda i: (given.args, dict(given.kwargs, position_embeddings=ropes[i if len(ropes) > 1 else 0]))

    def _table_owner(self) -> tuple[nn.Module, str, Tensor]:
        assert self.family.table is not None  # has_table
        owner, key = part(self._backbone, self.family.table[0]), self.family.table[1]
        return owner, key, getattr(owner, key)

    def _scaled_code(self, alpha: float) -> Any:
        """What the layers' arguments are built from × α for the pass: DINOv3's ``inv_freq``, BEiT's bias tables."""
        if alpha == 1.0:
            return nullcontext()
        if self.family.rope is not None:
            return scaled_slot(part(self._backbone, self.family.rope), "_buffers", "inv_freq", alpha)
        shared, own = bias_modules(self._backbone, self._layers)  # (None, [None, ...]) for a family without a bias
        return scaled_bias([m for m in (shared, *own) if m is not None], alpha)


@BACKENDS.register
class TransformersBackend(Backend):
    """transformers' vision transformers of :data:`SUPPORTED_CLASSES` (any other transformers model is refused by
    :class:`HFViT` with the classes it supports); its audit subject is :mod:`peanchor.adapters.hf_audit`'s."""

    name = "transformers"
    summary = "a transformers vision model (" + ", ".join(sorted({f.split("For")[0] for f in SUPPORTED_CLASSES})) + ")"

    def accepts(self, model: Any) -> bool:
        return is_transformers_model(model)

    def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict[str, Any] | None = None) -> Any:
        return HFViT(model, img_size=img_size).train(model.training)

    def wraps(self, wrapped: Any) -> bool:
        return isinstance(wrapped, HFViT)

    def audit_subject(self, wrapped: Any) -> Any:
        return hf_audit.audit_subject(wrapped)

    def signature(self, wrapped: Any) -> str:
        return hf_audit.signature(wrapped)
