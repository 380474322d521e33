"""Adapters that put third-party models behind peanchor's analysis interface.

``load_timm_model(name, weights=...)`` builds a timm ViT (never downloading; ``load_timm`` takes a timm model folder
too, :mod:`peanchor.adapters.timm_folder`) and wraps it in
:class:`TimmViT`, which has the same ``forward`` / ``spatial_tokens`` / ``forward_with_tokens``
interface as :class:`peanchor.models.vit.VisionTransformer`. ``load_hf_model(DIR)`` reads a transformers
``save_pretrained`` folder offline and wraps it in :class:`HFViT` (:mod:`peanchor.adapters.hf_vit`). Importing
this package needs neither timm nor transformers; using them does.

Imports: :mod:`peanchor.adapters.timm_vit`, :mod:`peanchor.adapters.timm_folder`, :mod:`peanchor.adapters.hf_vit`.
"""

from peanchor.adapters.hf_vit import HFViT, load_hf_model
from peanchor.adapters.timm_folder import load_timm
from peanchor.adapters.timm_vit import SUPPORTED_FAMILIES, TimmPE, TimmViT, load_timm_model, read_state_dict

__all__ = ["HFViT", "SUPPORTED_FAMILIES", "TimmPE", "TimmViT", "load_hf_model", "load_timm", "load_timm_model",
           "read_state_dict"]  # fmt: skip
