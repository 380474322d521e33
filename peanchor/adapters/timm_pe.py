"""Which timm family a model is, and which positional encoding it has: the reading every timm wrapper starts from.

* :func:`read_family`: the model's class → its family (``"vit"``, ``"eva"``, ``"beit"`` or ``"naflex"``, each taken
  by one wrapper), and each block's class → the norm whose output its attention sees (the SSDC probe point). A
  class or block peanchor does not wrap is refused in one line naming what it wraps (exact classes: a subclass
  with its own forward is refused too).
* :func:`read_pe`: the :class:`TimmPE` of a model of that family (``model.pe``) and, for an Eva with a rotary
  embedding, the builder of its table at α (:mod:`peanchor.adapters.timm_rope`); a rope class unknown here is
  refused.

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (timm_rope).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from peanchor.adapters.timm_rope import RopeBuilder, rope_kinds
from peanchor.core.errors import ConfigError

__all__ = ["SUPPORTED_FAMILIES", "TimmPE", "read_family", "read_pe"]

SUPPORTED_FAMILIES = (
    "timm.models.vision_transformer.VisionTransformer (learned pos_embed or pos_embed='none'; CLS/register tokens)",
    "timm.models.deit.VisionTransformerDistilled (DeiT distilled: CLS and distillation tokens)",
    "timm.models.eva.Eva (EVA/EVA02, *_rope_* and DINOv3 ViTs: APE, axial RoPE, mixed RoPE, DINOv3 RoPE)",
    "timm.models.beit.Beit and timm.models.naflexvit.NaFlexVit (their own backends)",
)


@dataclass(frozen=True)
class TimmPE:
    """What the analysis needs to know about a timm model's positional encoding (``model.pe``)."""

    name: str
    scalable: bool
    has_ape: bool
    rope: str | None  # "rope", "rope_mixed", "rope_dinov3" or None


def _vit() -> dict[type, dict[type, str]]:
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import Block, ParallelScalingBlock, VisionTransformer

    norms = {Block: "norm1", ParallelScalingBlock: "in_norm"}
    return {VisionTransformer: norms, VisionTransformerDistilled: norms}


def _eva() -> dict[type, dict[type, str]]:
    from timm.models.eva import Eva, EvaBlock

    return {Eva: {EvaBlock: "norm1"}}


def _beit() -> dict[type, dict[type, str]]:
    from timm.models.beit import Beit, Block

    return {Beit: {Block: "norm1"}}


def _naflex() -> dict[type, dict[type, str]]:
    from timm.models.naflexvit import NaFlexVit
    from timm.models.vision_transformer import Block

    return {NaFlexVit: {Block: "norm1"}}


#: Family → its model classes, each with block class → probe norm (imported only when that family is asked for).
_FAMILIES: dict[str, Callable[[], dict[type, dict[type, str]]]] = {
    "vit": _vit, "eva": _eva, "beit": _beit, "naflex": _naflex}  # fmt: skip


def read_family(model: nn.Module, families: tuple[str, ...]) -> tuple[str, list[str]]:
    """The family of ``model`` among ``families`` and, per block, the name of its probe norm; one ConfigError line
    for a class, a block or a token layout that is not supported."""
    for family in families:
        probe_norms = _FAMILIES[family]().get(type(model))
        if probe_norms is not None:
            break
    else:
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
    return family, [probe_norms[type(b)] for b in model.blocks]


def read_pe(model: nn.Module, family: str) -> tuple[TimmPE, RopeBuilder | None]:
    """The PE of a model of ``family`` and, for an Eva with a rope, the builder of its rotary table at α."""
    if family == "beit":  # a relative position bias, beside an absolute table or not; α scales the bias
        has_ape = model.pos_embed is not None
        return TimmPE("timm:rel_bias_ape" if has_ape else "timm:rel_bias", True, has_ape, None), None
    if family == "naflex":  # "learned", "factorized" or "none", on the patch tokens only
        kind = model.embeds.pos_embed_type
        return TimmPE(f"timm:naflex_{kind}", kind != "none", kind != "none", None), None
    rope = getattr(model, "rope", None) if family == "eva" else None
    rope_name, builder = None, None
    if rope is not None:
        kinds = rope_kinds()
        if type(rope) not in kinds:
            raise ConfigError(f"timm rotary embedding {type(rope).__name__} is not supported; "
                              f"supported: {', '.join(c.__name__ for c in kinds)}")  # fmt: skip
        rope_name, builder = kinds[type(rope)]
    has_ape = model.pos_embed is not None
    name = "_".join(p for p in (rope_name, "ape" if has_ape else None) if p) or "none"
    return TimmPE(f"timm:{name}", has_ape or rope is not None, has_ape, rope_name), builder
