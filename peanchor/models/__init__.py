"""Model sizes and ``create_model``.

The model itself (:mod:`peanchor.models.vit`, :mod:`peanchor.models.flops`) is imported on first use, so that the
sizes and arguments (:mod:`peanchor.models.args`: the training config's schema reads them) load without torch.

Imports: :mod:`peanchor.models.args`, :mod:`peanchor.models.vit`, :mod:`peanchor.models.flops` (lazily).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from peanchor.models.args import MODEL_SIZES, ViTArgs, resolve_args

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.models.flops import forward_flops, train_flops
    from peanchor.models.vit import VisionTransformer

# name → the module it lives in, imported on first use (torch)
_LAZY = {"VisionTransformer": "peanchor.models.vit", "forward_flops": "peanchor.models.flops",
         "train_flops": "peanchor.models.flops"}  # fmt: skip


def create_model(name: str, **kwargs: Any) -> VisionTransformer:
    """Build a registered ViT size: ``create_model(name, *, pe="none", num_classes, img_size=None, patch_size=None,
    pe_kwargs=None, **overrides)``, the arguments of :func:`~peanchor.models.args.resolve_args`.

    The result's ``args`` (a :class:`~peanchor.models.args.ViTArgs`) holds every resolved field, and its
    ``model_args`` (their JSON form, as checkpoints store it) rebuild it through ``create_model(**model.model_args)``
    even if the size table changes later. ``overrides`` are fields of :class:`~peanchor.models.args.Architecture`.

    Returns:
        The :class:`~peanchor.models.VisionTransformer`, in training mode, with random weights.

    Examples:
        >>> m = create_model("vit_micro", pe="rope", num_classes=3)
        >>> m.grid, m.depth, m.pe_name
        ((4, 4), 2, 'rope')
    """
    from peanchor.models.vit import VisionTransformer

    return VisionTransformer.from_args(resolve_args(name, **kwargs))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peanchor.models' has no attribute {name!r}")


__all__ = ["MODEL_SIZES", "ViTArgs", "VisionTransformer", "create_model", "forward_flops", "train_flops"]
