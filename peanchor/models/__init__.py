"""Model sizes and ``create_model``.

Imports: :mod:`peanchor.models.vit`, :mod:`peanchor.models.flops`.
"""

from __future__ import annotations

from typing import Any

from peanchor.models.flops import forward_flops, train_flops
from peanchor.models.vit import VisionTransformer

# Every field a size sets can be overridden through create_model(**overrides).
MODEL_SIZES: dict[str, dict[str, Any]] = {
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
}  # fmt: skip

ARCH_KEYS = (
    "embed_dim", "depth", "num_heads", "mlp_ratio", "drop_rate", "attn_drop_rate", "head_drop_rate",
    "drop_path_rate", "final_norm", "norm_eps", "qkv_bias",
)  # fmt: skip
_DEFAULTS: dict[str, Any] = dict(
    mlp_ratio=4.0, drop_rate=0.0, attn_drop_rate=0.0, head_drop_rate=None, drop_path_rate=0.0, final_norm=False,
    norm_eps=1e-5, qkv_bias=True,
)  # fmt: skip


def create_model(
    name: str,
    *,
    pe: str = "none",
    num_classes: int,
    img_size: int | None = None,
    patch_size: int | None = None,
    pe_kwargs: dict[str, Any] | None = None,
    **overrides: Any,
) -> VisionTransformer:
    """Build a registered ViT size with positional encoding ``pe``.

    The result's ``model_args`` holds every resolved architecture field, so
    ``create_model(**model.model_args)`` rebuilds it even if the size table changes later.

    >>> m = create_model("vit_micro", pe="rope", num_classes=3)
    >>> m.grid, m.depth, m.pe_name
    ((4, 4), 2, 'rope')
    """
    try:
        size = MODEL_SIZES[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(MODEL_SIZES)}") from None
    unknown = set(overrides) - set(ARCH_KEYS)
    if unknown:
        raise ValueError(f"unknown model override(s) {sorted(unknown)}; valid: {', '.join(ARCH_KEYS)}")
    arch = {**_DEFAULTS, **{k: v for k, v in size.items() if k in ARCH_KEYS}, **overrides}
    args: dict[str, Any] = dict(
        name=name,
        pe=pe,
        num_classes=num_classes,
        img_size=img_size or size["img_size"],
        patch_size=patch_size or size["patch_size"],
        pe_kwargs=dict(pe_kwargs or {}),
        **arch,
    )
    model = VisionTransformer(**{k: v for k, v in args.items() if k != "name"})
    model.model_args = args
    return model


__all__ = ["MODEL_SIZES", "VisionTransformer", "create_model", "forward_flops", "train_flops"]
