"""Model sizes and ``create_model``.

Imports: :mod:`peanchor.models.args`, :mod:`peanchor.models.vit`, :mod:`peanchor.models.flops`.
"""

from __future__ import annotations

from typing import Any

from peanchor.models.args import MODEL_SIZES, ViTArgs, resolve_args
from peanchor.models.flops import forward_flops, train_flops
from peanchor.models.vit import VisionTransformer


def create_model(name: str, **kwargs: Any) -> VisionTransformer:
    """Build a registered ViT size: ``create_model(name, *, pe="none", num_classes, img_size=None, patch_size=None,
    pe_kwargs=None, **overrides)``, the arguments of :func:`~peanchor.models.args.resolve_args`.

    The result's ``args`` (a :class:`~peanchor.models.args.ViTArgs`) holds every resolved field, and its
    ``model_args`` (their JSON form, as checkpoints store it) rebuild it through ``create_model(**model.model_args)``
    even if the size table changes later. ``overrides`` are fields of :class:`~peanchor.models.args.Architecture`.

    >>> m = create_model("vit_micro", pe="rope", num_classes=3)
    >>> m.grid, m.depth, m.pe_name
    ((4, 4), 2, 'rope')
    """
    return VisionTransformer.from_args(resolve_args(name, **kwargs))


__all__ = ["MODEL_SIZES", "ViTArgs", "VisionTransformer", "create_model", "forward_flops", "train_flops"]
