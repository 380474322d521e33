"""The model's arguments, spelled once: :class:`ViTArgs` (every argument that builds a peanchor ViT) and its
architecture part :class:`Architecture`.

One dataclass serves three readers, so that a field added here is known to all of them:

- ``create_model(name, **overrides)`` resolves a registered size into a :class:`ViTArgs`
  (:func:`resolve_args`), and ``VisionTransformer`` is built from it;
- ``--set model.overrides.<field>`` accepts exactly the fields of :class:`Architecture`, with their types
  (:data:`peanchor.training.config.ModelOverrides` is derived from it);
- a checkpoint's ``model_args`` metadata is :meth:`ViTArgs.to_dict` (JSON), and ``create_model(**model_args)``
  rebuilds the same model even if the size table changes later.

The sizes are a :class:`peanchor.core.registry.Registry` (``MODEL_SIZES.register(size, name="vit_huge")``; plug-ins
from the entry-point group ``peanchor.model_sizes``).

Imports: :mod:`peanchor.core.registry`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from peanchor.core.registry import Registry

__all__ = ["ARCH_FIELDS", "Architecture", "MODEL_SIZES", "ViTArgs", "resolve_args"]


@dataclass(frozen=True, kw_only=True)
class Architecture:
    """The network's shape and regularisation: what ``model.overrides`` may change."""

    embed_dim: int
    depth: int
    num_heads: int
    mlp_ratio: float = 4.0
    drop_rate: float = 0.0  # dropout on the embedding (after the PE), in attention's projection and the MLP
    attn_drop_rate: float = 0.0  # dropout on the attention weights
    head_drop_rate: float | None = None  # dropout on the CLS token before the head; None: drop_rate
    drop_path_rate: float = 0.0  # stochastic depth of the last block (linear from 0 in the first)
    final_norm: bool = False  # a LayerNorm before the head
    norm_eps: float = 1e-5
    qkv_bias: bool = True


#: The fields of :class:`Architecture`, in order.
ARCH_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Architecture))


@dataclass(frozen=True, kw_only=True)
class ViTArgs(Architecture):
    """Everything that builds a peanchor ViT: a registered size's name, the PE, the task and the architecture."""

    name: str
    pe: str = "none"
    num_classes: int
    img_size: int
    patch_size: int
    pe_kwargs: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, as stored in a checkpoint's ``model_args``; ``create_model(**d)`` rebuilds the model."""
        return {"name": self.name, "pe": self.pe, "num_classes": self.num_classes, "img_size": self.img_size,
                "patch_size": self.patch_size, "pe_kwargs": dict(self.pe_kwargs),
                **{k: getattr(self, k) for k in ARCH_FIELDS}}  # fmt: skip

    def architecture(self) -> dict[str, Any]:
        """The :class:`Architecture` fields as keyword arguments."""
        return {k: getattr(self, k) for k in ARCH_FIELDS}


# Every field a size sets can be overridden through create_model(**overrides) (ARCH_FIELDS, plus the image and
# patch sizes as create_model's own arguments).
MODEL_SIZES: Registry[dict[str, Any]] = Registry("model size", "peanchor.model_sizes")
for _name, _size in {
    # For unit tests: a few thousand parameters.
    "vit_micro": dict(img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0),
    # The CPU size: 32 px, patch 4 (an 8×8 grid).
    "vit_tiny": dict(img_size=32, patch_size=4, embed_dim=192, depth=6, num_heads=3, mlp_ratio=4.0, drop_path_rate=0.1),
    # ViT-S/16, the usual GPU reference size.
    "vit_small": dict(img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=6, mlp_ratio=4.0, drop_path_rate=0.1),
    # The paper's model: 8 heads of 48, dropout 0.15 on the embedding, attention and MLP (not before the head),
    # stochastic depth 0.2 (timm's linear rule: 0 in the first block, 0.2 in the last), no final norm.
    "vit_paper": dict(
        img_size=224, patch_size=16, embed_dim=384, depth=12, num_heads=8, mlp_ratio=4.0,
        drop_rate=0.15, attn_drop_rate=0.15, head_drop_rate=0.0, drop_path_rate=0.2, final_norm=False,
    ),
}.items():  # fmt: skip
    MODEL_SIZES.register(_size, name=_name)


def resolve_args(
    name: str,
    *,
    pe: str = "none",
    num_classes: int,
    img_size: int | None = None,
    patch_size: int | None = None,
    pe_kwargs: dict[str, Any] | None = None,
    **overrides: Any,
) -> ViTArgs:
    """The arguments of registered size ``name`` with ``overrides`` (fields of :class:`Architecture`) applied.

    >>> a = resolve_args("vit_micro", pe="rope", num_classes=3, depth=3)
    >>> a.depth, a.embed_dim, a.img_size, a.head_drop_rate
    (3, 32, 16, None)
    >>> resolve_args("vit_micro", num_classes=3, width=8)
    Traceback (most recent call last):
    ...
    ValueError: unknown model override(s) ['width']; valid: embed_dim, depth, num_heads, mlp_ratio, drop_rate, \
attn_drop_rate, head_drop_rate, drop_path_rate, final_norm, norm_eps, qkv_bias
    """
    try:
        size = MODEL_SIZES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODEL_SIZES)}") from None
    unknown = set(overrides) - set(ARCH_FIELDS)
    if unknown:
        raise ValueError(f"unknown model override(s) {sorted(unknown)}; valid: {', '.join(ARCH_FIELDS)}")
    arch = {**{k: v for k, v in size.items() if k in ARCH_FIELDS}, **overrides}
    return ViTArgs(name=name, pe=pe, num_classes=num_classes, img_size=img_size or size["img_size"],
                   patch_size=patch_size or size["patch_size"], pe_kwargs=dict(pe_kwargs or {}), **arch)  # fmt: skip


def field_types(cls: type) -> dict[str, Any]:
    """Field name → resolved type of a dataclass here (for the config's typed overrides)."""
    return typing.get_type_hints(cls)
