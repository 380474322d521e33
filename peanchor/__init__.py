"""peanchor: how positional encodings anchor spatial structure and robustness in Vision Transformers.

Imports: nothing at import time; ``create_model``, ``load_model`` and ``PE_NAMES`` lazily from
:mod:`peanchor.models`, :mod:`peanchor.checkpoint` and :mod:`peanchor.pe`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["__version__", "create_model", "load_model", "PE_NAMES", "MODEL_SIZES"]

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.checkpoint import load_model
    from peanchor.models import MODEL_SIZES, create_model
    from peanchor.pe import PE_NAMES


def __getattr__(name: str) -> Any:
    # Lazy so that `peanchor --help` does not pay for importing torch.
    if name in ("create_model", "MODEL_SIZES"):
        from peanchor import models

        return getattr(models, name)
    if name == "PE_NAMES":
        from peanchor import pe

        return pe.PE_NAMES
    if name == "load_model":
        from peanchor.checkpoint import load_model

        return load_model
    raise AttributeError(f"module 'peanchor' has no attribute {name!r}")
