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
and says ``has_head = False``; :func:`peanchor.api.analyze` then reports no accuracy for it.

Imports: torch, transformers (lazily); :mod:`peanchor.adapters` (hf_hooks), :mod:`peanchor.models.interface`,
:mod:`peanchor.interventions`, :mod:`peanchor.errors`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.errors import CheckpointError, ConfigError, PeanchorError
from peanchor.adapters.hf_hooks import edited_rope, edited_table, rope_planes, site_hooks, table_of
from peanchor.interventions import BLOCK_SITES, NO_INTERVENTION, HookPoints, Intervention, Start, permute_tokens
from peanchor.interventions.edit import check_grid
from peanchor.models.interface import AnalysisInterface, AttentionSink, Intermediates

__all__ = ["HFViT", "SUPPORTED_CLASSES", "is_transformers_model", "load_hf_model"]

IMAGENET = ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
HALF = ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
OPENAI_CLIP = ((0.48145466, 0.4578275, 0.40821073), (0.26862954, 0.26130258, 0.27577711))


@dataclass(frozen=True)
class Family:
    """Where a transformers family keeps what the probes need, relative to its backbone module."""

    name: str
    layers: str  # the ModuleList of layers
    norm: str  # each layer's first norm: the SSDC probe point
    attention: str  # each layer's attention module (returns (output, weights))
    patch: str  # the patch embedding: (B, N, D) out, or a Conv2d's (B, D, h, w)
    table: tuple[str, str] | None  # (module, parameter) of the learned position table
    rope: str | None  # the rotary module with an ``inv_freq`` buffer
    interpolate_kwarg: bool  # whether forward takes ``interpolate_pos_encoding``
    extra_prefix: int  # prefix tokens besides the registers (CLS, distillation)
    norm_stats: tuple[tuple[float, ...], tuple[float, ...]]  # the mean/std its published checkpoints' processors use
    out_proj: str = "o_proj"  # the attention's output projection, which receives the merged heads


_VIT = dict(layers="layers", norm="layernorm_before", attention="attention", patch="embeddings.patch_embeddings",
            table=("embeddings", "position_embeddings"), rope=None, interpolate_kwarg=True)  # fmt: skip
_DINO2 = dict(layers="encoder.layer", norm="norm1", attention="attention", patch="embeddings.patch_embeddings",
              table=("embeddings", "position_embeddings"), rope=None, interpolate_kwarg=False, extra_prefix=1,
              norm_stats=IMAGENET)  # fmt: skip
_TOWER = dict(layers="encoder.layers", norm="layer_norm1", attention="self_attn", patch="embeddings.patch_embedding",
              table=("embeddings.position_embedding", "weight"), rope=None, interpolate_kwarg=True,
              out_proj="out_proj")  # fmt: skip
FAMILIES = {
    "vit": Family("vit", extra_prefix=1, norm_stats=HALF, **_VIT),  # type: ignore[arg-type]
    "deit": Family("deit", extra_prefix=2, norm_stats=IMAGENET, **_VIT),  # type: ignore[arg-type]
    "dinov2": Family("dinov2", **_DINO2),  # type: ignore[arg-type]
    "dinov2_with_registers": Family("dinov2_with_registers", **_DINO2),  # type: ignore[arg-type]
    "clip": Family("clip", extra_prefix=1, norm_stats=OPENAI_CLIP, **_TOWER),  # type: ignore[arg-type]
    "siglip": Family("siglip", extra_prefix=0, norm_stats=HALF, **_TOWER),  # type: ignore[arg-type]
    "dinov3": Family("dinov3", layers="model.layer", norm="norm1", attention="attention",
                     patch="embeddings.patch_embeddings", table=None, rope="rope_embeddings", interpolate_kwarg=False,
                     extra_prefix=1, norm_stats=IMAGENET),  # fmt: skip
}

#: class name → (family, attribute of the backbone in the model, or "" for the model itself)
SUPPORTED_CLASSES: dict[str, tuple[str, str]] = {
    "ViTModel": ("vit", ""), "ViTForImageClassification": ("vit", "vit"),
    "DeiTModel": ("deit", ""), "DeiTForImageClassification": ("deit", "deit"),
    "DeiTForImageClassificationWithTeacher": ("deit", "deit"),
    "Dinov2Model": ("dinov2", ""), "Dinov2ForImageClassification": ("dinov2", "dinov2"),
    "Dinov2WithRegistersModel": ("dinov2_with_registers", ""),
    "Dinov2WithRegistersForImageClassification": ("dinov2_with_registers", "dinov2_with_registers"),
    "CLIPVisionModel": ("clip", ""), "CLIPForImageClassification": ("clip", "vision_model"),
    "SiglipVisionModel": ("siglip", ""), "SiglipForImageClassification": ("siglip", "vision_model"),
    "DINOv3ViTModel": ("dinov3", ""),
}  # fmt: skip
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")  # fmt: skip


def _require_transformers() -> Any:
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


class _Stop(Exception):
    """Raised by the last probe hook a truncated pass needs: the rest of the forward is not computed."""


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
        transformers = _require_transformers()
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
        return "hf:rope" if self.family.rope else "hf:ape"

    @property
    def pe_scalable(self) -> bool:
        return True  # every supported family has a learned table or a rope

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
        if self.family.table is not None and not self._interpolate:
            points |= {"pe.table", "input.grid"}
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
    def _permuted(self, perm: Tensor | None) -> Iterator[None]:
        if perm is None:
            yield
            return

        def hook(_m: nn.Module, _i: Any, out: Tensor) -> Tensor:
            if out.dim() == 4:  # a Conv2d's (B, D, h, w): permute its flattened, row-major grid
                b, d, h, w = out.shape
                moved = permute_tokens(out.flatten(2).transpose(1, 2), perm)  # (B, N, D)
                return moved.transpose(1, 2).reshape(b, d, h, w)
            return permute_tokens(out, perm)  # (B, N, D)

        handle = _attr(self._backbone, self.family.patch).register_forward_hook(hook)
        try:
            yield
        finally:
            handle.remove()

    @contextmanager
    def _scaled(self, alpha: float) -> Iterator[None]:
        """The table (or the rope's ``inv_freq``) × α for the pass; the original tensor is put back after."""
        if alpha == 1.0:
            yield
            return
        if self.family.table is not None:
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

    @contextmanager
    def _probes(self, sink: list[Tensor], count: int, stop: bool, first: int = 0) -> Iterator[None]:
        """Hooks on the first norms of layers ``first`` to ``count - 1``, appending their output minus the prefix
        tokens to ``sink``; with ``stop``, the pass ends right after the last of them."""
        p = self._prefix

        def hook(_m: nn.Module, _i: Any, out: Tensor) -> None:
            sink.append(out[:, p:])  # (B, N, D): what attention sees, patch slots only
            if stop and len(sink) == count:
                raise _Stop

        layers = self._layers[first:count]
        handles = [getattr(layer, self.family.norm).register_forward_hook(hook) for layer in layers]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    @contextmanager
    def _attention(self, sink: AttentionSink | None) -> Iterator[None]:
        if sink is None:
            yield
            return
        before = self.model.config._attn_implementation
        self.model.set_attn_implementation("eager")  # the path that computes (and returns) the softmax weights
        handles = []
        for i, layer in enumerate(self._layers):

            def hook(_m: nn.Module, _i: Any, out: Any, i: int = i) -> None:
                sink(i, out[1])  # (B, H, T, T), prefix tokens first

            handles.append(getattr(layer, self.family.attention).register_forward_hook(hook))
        try:
            yield
        finally:
            for h in handles:
                h.remove()
            self.model.set_attn_implementation(before)

    @contextmanager
    def _started(self, first: int, residual: Tensor | None) -> Iterator[None]:
        """For the pass, the encoder runs layers ``first`` on only, the first of them fed ``residual`` (the stream
        entering it in an earlier pass) in place of what the embeddings computed."""
        if not first:
            yield
            return
        owner_path, _, name = self.family.layers.rpartition(".")
        owner = _attr(self._backbone, owner_path)

        def feed(_m: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            if args:
                return (residual, *args[1:]), kwargs
            return args, dict(kwargs, hidden_states=residual)

        handle = self._layers[first].register_forward_pre_hook(feed, with_kwargs=True)
        setattr(owner, name, nn.ModuleList(list(self._layers)[first:]))  # the same modules, the earlier ones left out
        try:
            yield
        finally:
            setattr(owner, name, self._layers)
            handle.remove()

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
            stack.enter_context(self._permuted(intervention.token_perm))
            if table:
                assert run is not None and self.family.table is not None
                owner, key = _attr(self._backbone, self.family.table[0]), self.family.table[1]
                rows = table_of(getattr(owner, key), self.num_patches, self.grid, float(intervention.pe_scale))
                stack.enter_context(edited_table(self._backbone.embeddings, run.table(rows)))
                kwargs = {"interpolate_pos_encoding": True} if self.family.interpolate_kwarg else {}
            else:
                stack.enter_context(self._scaled(float(intervention.pe_scale)))
            if run is not None and run.acts_at("rope.tables"):
                stack.enter_context(edited_rope(_attr(self._backbone, self.family.rope or ""), self._layers, run))
            if run is not None:
                stack.enter_context(site_hooks(self._layers, self.family.attention, self.family.out_proj, run,
                                               run.hooks.num_heads))  # fmt: skip
            stack.enter_context(self._probes(probes, count, stop=not head, first=first))
            stack.enter_context(self._attention(attention))
            stack.enter_context(self._started(first, start.residual if start is not None else None))
            try:
                out = self.model(pixel_values=images, **kwargs)
            except _Stop:
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


def _read_stats(folder: Path) -> tuple[tuple[float, ...] | None, tuple[float, ...] | None]:
    """``image_mean``/``image_std`` from the folder's ``preprocessor_config.json``, when it has one."""
    path = folder / "preprocessor_config.json"
    if not path.is_file():
        return None, None
    try:
        cfg = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not readable JSON ({e})") from e
    mean, std = cfg.get("image_mean"), cfg.get("image_std")
    return (tuple(mean) if mean else None), (tuple(std) if std else None)


def load_hf_model(folder: str | Path, *, img_size: int | None = None) -> HFViT:
    """A local ``save_pretrained`` folder as an :class:`HFViT`, in eval mode.

    Read with ``local_files_only=True`` (nothing is downloaded) and without ``trust_remote_code``. The class comes
    from ``config.json``'s ``architectures``; a class outside :data:`SUPPORTED_CLASSES`, a folder without
    ``config.json`` or without weights is one :class:`~peanchor.errors.PeanchorError` line.

    Returns:
        The :class:`HFViT` wrapping the model, in eval mode.
    """
    transformers = _require_transformers()
    path = Path(folder)
    if not path.is_dir():
        raise CheckpointError(f"{path}: no such directory (expected a transformers save_pretrained folder)")
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path} has no config.json: not a transformers save_pretrained folder")
    if not any((path / f).is_file() for f in _WEIGHT_FILES):
        names = ", ".join(_WEIGHT_FILES[::2])
        raise CheckpointError(f"{path} has no weights ({names}): save them with model.save_pretrained")
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as e:
        raise CheckpointError(f"{path}/config.json could not be read: {str(e).strip().splitlines()[0]}") from e
    arch = (getattr(config, "architectures", None) or [None])[0]
    if arch not in SUPPORTED_CLASSES:
        raise ConfigError(f"{path}: model class {arch} is not supported; supported: {_supported_line()}")
    cls = getattr(transformers, arch)
    logging = transformers.utils.logging
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # one local folder: no "Loading weights" bar on stderr
    try:
        model = cls.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"{path}: transformers could not load {arch}: {str(e).strip().splitlines()[0]}") from e
    finally:
        if bars:
            logging.enable_progress_bar()
    mean, std = _read_stats(path)
    wrapped = HFViT(model, img_size=img_size, mean=mean, std=std)
    wrapped._model_args["folder"] = str(path)
    return wrapped.eval()
