"""Adapters that put third-party models behind peanchor's analysis interface.

``load_timm_model(name, weights=...)`` builds a timm ViT (never downloading) and wraps it in
:class:`TimmViT`, which has the same ``forward`` / ``spatial_tokens`` / ``forward_with_tokens``
interface as :class:`peanchor.models.vit.VisionTransformer`. Importing this package does not need
timm; using it does.

Imports: :mod:`peanchor.adapters.timm_vit`.
"""

from peanchor.adapters.timm_vit import SUPPORTED_FAMILIES, TimmPE, TimmViT, load_timm_model, read_state_dict

__all__ = ["SUPPORTED_FAMILIES", "TimmPE", "TimmViT", "load_timm_model", "read_state_dict"]
