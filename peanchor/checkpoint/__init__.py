"""A trained model on disk: the checkpoint files (:mod:`~peanchor.checkpoint.files`, re-exported here) and the
reading of foreign weight files (:mod:`~peanchor.checkpoint.weights`).

Imports: :mod:`peanchor.checkpoint.files` (its public names).
"""

__all__ = ['FORMAT', 'MODEL_FILE', 'load_model', 'model_digest', 'read_checkpoint', 'read_metadata',
    'safetensors_bytes', 'save_model', 'unwrap_model', 'write_safetensors']  # fmt: skip

from peanchor.checkpoint.files import (FORMAT, MODEL_FILE, load_model, model_digest, read_checkpoint, read_metadata,
    safetensors_bytes, save_model, unwrap_model, write_safetensors)  # noqa: E402
