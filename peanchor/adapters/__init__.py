"""Adapters that put third-party models behind peanchor's analysis interface, one registered backend per file
(:mod:`peanchor.adapters.backend`: ``wrap_model`` picks the backend that accepts a model).

``load_timm_model(name, weights=...)`` builds a timm model (never downloading; ``load_timm`` takes a timm model
folder too, :mod:`peanchor.adapters.timm_folder`) and wraps it: a ViT, DeiT or Eva in :class:`TimmViT`, a BEiT in
:class:`TimmBeit`. ``load_hf_model(DIR)`` reads a transformers ``save_pretrained`` folder offline and wraps it in
:class:`HFViT` (:mod:`peanchor.adapters.hf_vit`; BEiT included). Importing this package needs neither timm nor
transformers; using them does.

Imports: :mod:`peanchor.adapters` (backend, peanchor_vit, timm_vit, timm_beit, timm_load, timm_folder, hf_vit,
hf_load).
"""

from peanchor.adapters.backend import BACKENDS, Backend, backend_of, wrap_model
from peanchor.adapters.hf_load import load_hf_model
from peanchor.adapters.hf_vit import HFViT
from peanchor.adapters.peanchor_vit import PeanchorBackend
from peanchor.adapters.timm_beit import TimmBeit
from peanchor.adapters.timm_folder import load_timm
from peanchor.adapters.timm_load import load_timm_model, read_state_dict
from peanchor.adapters.timm_vit import SUPPORTED_FAMILIES, TimmPE, TimmViT

__all__ = ["BACKENDS", "Backend", "HFViT", "PeanchorBackend", "SUPPORTED_FAMILIES", "TimmBeit", "TimmPE", "TimmViT",
           "backend_of", "load_hf_model", "load_timm", "load_timm_model", "read_state_dict", "wrap_model"]  # fmt: skip
