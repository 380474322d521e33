"""The transformers families the transformers backend takes (:mod:`peanchor.adapters.hf_vit`): where each keeps what
the probes and the hook points need, relative to its backbone module, and the normalisation its published
checkpoints use; which model class is which family; and what a model of a family has as its PE (:func:`pe_parts`).

Imports: :mod:`peanchor.adapters` (hf_bias).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from peanchor.adapters.hf_bias import bias_modules

__all__ = ["FAMILIES", "SUPPORTED_CLASSES", "Family", "PEParts", "part", "pe_parts"]

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
    bias: bool = False  # a relative position bias (BEiT: per layer and/or shared; :mod:`peanchor.adapters.hf_bias`)


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
    # BEiT: a relative position bias, and optionally an absolute table (use_absolute_position_embeddings)
    "beit": Family("beit", layers="layers", norm="layernorm_before", attention="attention",
                   patch="embeddings.patch_embeddings", table=("embeddings", "position_embeddings"), rope=None,
                   interpolate_kwarg=False, extra_prefix=1, norm_stats=HALF, bias=True),  # fmt: skip
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
    "BeitModel": ("beit", ""), "BeitForImageClassification": ("beit", "beit"),
}  # fmt: skip


def part(module: Any, dotted: str) -> Any:
    """The attribute at a dotted path of ``module`` (``""``: the module itself)."""
    for name in dotted.split(".") if dotted else ():
        module = getattr(module, name)
    return module


@dataclass(frozen=True)
class PEParts:
    """What a model's configuration gave it of its family's PE, and peanchor's name for that."""

    name: str  # hf:ape, hf:rope, hf:rel_bias, hf:rel_bias_ape or hf:none
    table: bool  # a learned absolute table (BEiT's is optional)
    bias: bool  # a relative position bias (BEiT's: shared, per layer, both or none)


def pe_parts(family: Family, backbone: Any) -> PEParts:
    """The PE parts of ``backbone`` (the module that holds the family's layers and embeddings)."""
    table = family.table is not None and getattr(part(backbone, family.table[0]), family.table[1], None) is not None
    shared, own = bias_modules(backbone, part(backbone, family.layers)) if family.bias else (None, [])
    bias = shared is not None or any(m is not None for m in own)
    if bias:
        name = "hf:rel_bias_ape" if table else "hf:rel_bias"
    else:
        name = "hf:rope" if family.rope else "hf:ape" if table else "hf:none"  # BEiT with neither: none
    return PEParts(name, table, bias)
