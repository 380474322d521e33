"""Self-describing model files: safetensors weights plus the arguments that rebuild the model.

``save_model`` stores ``model.model_args`` (JSON) in the safetensors metadata, so
``load_model(path)`` needs nothing but the file: it calls ``create_model(**model_args)`` and loads
the weights strictly. Nothing here ever unpickles: a ``torch.save`` file is refused before a byte of
it is interpreted (reading and strict loading: :mod:`peanchor.checkpoint.weights`).

Imports: :mod:`peanchor.checkpoint.weights`, :mod:`peanchor.core.fileio`, :mod:`peanchor.models` (to rebuild a model) and
:mod:`peanchor.data` (its dataset's normalisation).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save as safetensors_save
from torch import Tensor, nn

from peanchor.core import fileio
from peanchor.core.errors import CheckpointError
from peanchor.checkpoint.weights import load_strict, read_safetensors

FORMAT = "peanchor-vit/1"
MODEL_FILE = "model.safetensors"

def unwrap_model(model: nn.Module) -> nn.Module:
    """The plain model inside DDP (``.module``) and ``torch.compile`` (``._orig_mod``) wrappers."""
    while True:
        if hasattr(model, "_orig_mod"):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def state_tensors(module: nn.Module, prefix: str = "") -> dict[str, Tensor]:
    """A CPU copy of ``module.state_dict()`` that safetensors can write (no shared storage)."""
    # clone() gives every entry its own storage: safetensors refuses tensors that share memory.
    return {prefix + k: v.detach().to("cpu", copy=True).contiguous() for k, v in module.state_dict().items()}


def _metadata_strings(extra: dict[str, Any] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (extra or {}).items():
        out[str(key)] = value if isinstance(value, str) else json.dumps(value)
    return out


def safetensors_bytes(tensors: dict[str, Tensor], metadata: dict[str, str]) -> bytes:
    """Serialise like ``safetensors.torch.save`` but with a canonical header.

    safetensors writes its metadata map in a random order, so two saves of the same weights differ
    byte-wise. We re-emit the JSON header with the metadata keys sorted (tensor entries keep the
    library's order): identical inputs then give identical files.
    """
    raw = safetensors_save(tensors, metadata=metadata)
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    meta = header.pop("__metadata__", None)
    ordered = {"__metadata__": dict(sorted(meta.items()))} if meta else {}
    ordered.update(header)
    text = json.dumps(ordered, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces to 8-byte alignment
    return struct.pack("<Q", len(text)) + text + raw[8 + n :]


def write_safetensors(path: str | os.PathLike[str], tensors: dict[str, Tensor], metadata: dict[str, str]) -> None:
    """Atomically write a reproducible safetensors file (see :func:`safetensors_bytes`)."""
    data = safetensors_bytes(tensors, metadata)
    fileio.write_bytes(path, data)


def save_model(model: nn.Module, path: str | os.PathLike[str], extra_metadata: dict[str, Any] | None = None) -> Path:
    """Write the weights of ``model`` and its ``model_args`` to ``path`` (a ``.safetensors`` file).

    ``extra_metadata`` values are stored as strings (non-strings as JSON). The write is atomic.

    Returns:
        ``path``, as a ``Path``.
    """
    model = unwrap_model(model)
    model_args = getattr(model, "model_args", None)
    if not isinstance(model_args, dict):
        raise TypeError("save_model needs a model built by peanchor.create_model (it has no model_args)")
    metadata = _metadata_strings(extra_metadata)
    metadata.update({"format": FORMAT, "model_args": json.dumps(model_args)})
    path = Path(path)
    write_safetensors(path, state_tensors(model), metadata)
    return path


def resolve_model_path(path: str | os.PathLike[str]) -> Path:
    """A run directory means its ``model.safetensors``; a file means itself."""
    p = Path(path)
    if p.is_dir():
        p = p / MODEL_FILE
        if not p.is_file():
            raise CheckpointError(f"{path} has no {MODEL_FILE}: not a finished peanchor run directory")
    elif not p.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    return p


def read_checkpoint(
    path: str | os.PathLike[str], device: str | torch.device = "cpu"
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tensors and metadata of a safetensors file; any damage becomes a :class:`CheckpointError`."""
    return read_safetensors(path, device)


def read_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a model file (or run directory), with ``model_args`` decoded from JSON."""
    p = resolve_model_path(path)
    _, raw = read_safetensors(p, tensors=False)
    metadata: dict[str, Any] = dict(raw)
    if "model_args" in metadata:
        metadata["model_args"] = _decode_model_args(p, metadata["model_args"])
    return metadata


def _decode_model_args(path: Path, raw: str) -> dict[str, Any]:
    try:
        args = json.loads(raw)
    except json.JSONDecodeError:
        args = None
    if not isinstance(args, dict) or "name" not in args:
        raise CheckpointError(
            f"{path} has a damaged model_args entry in its metadata (expected a JSON object with 'name')"
        )
    return args


def load_model(path: str | os.PathLike[str], map_location: str | torch.device = "cpu") -> nn.Module:
    """Rebuild a model from a run directory or a ``.safetensors`` file written by :func:`save_model`.

    The model comes back in eval mode on ``map_location``, with ``model.mean`` and ``model.std``: the
    normalisation of the dataset it was trained on (from the training config in its metadata; absent without
    one), which :func:`peanchor.analyze` uses. A missing, truncated or foreign file
    (no ``model_args``, different parameter names or shapes) raises :class:`CheckpointError`.

    Returns:
        The rebuilt :class:`~peanchor.models.VisionTransformer`, in eval mode on ``map_location``.
    """
    from peanchor.models import create_model

    p = resolve_model_path(path)
    tensors, metadata = read_checkpoint(p)
    if "model_args" not in metadata:
        raise CheckpointError(
            f"{p} is a safetensors file without peanchor model_args in its metadata (a foreign layout); "
            "for the paper's checkpoints use `peanchor import`"
        )
    args = _decode_model_args(p, metadata["model_args"])
    try:
        model = create_model(**args)
    except (TypeError, ValueError) as e:
        raise CheckpointError(f"{p}: cannot rebuild the model from its model_args: {e}") from e
    load_strict(model, tensors, f"{p} does not match its model_args")
    normalization = _normalization(metadata.get("config"))
    if normalization is not None:  # what peanchor.analyze normalises tensors with when given no mean=/std=
        model.mean, model.std = normalization
    return model.to(map_location).eval()


def _normalization(config: Any) -> tuple[tuple[float, ...], tuple[float, ...]] | None:
    """The (mean, std) the model was trained with, from the training config in its metadata (its dataset's
    normalisation); None when the metadata has no config or its dataset cannot say (a prepared folder moved away)."""
    from peanchor.data import DataSpec, normalization
    from peanchor.core.errors import PeanchorError

    try:
        data = json.loads(config).get("data") if isinstance(config, str) else None
        return normalization(DataSpec.from_dict(data)) if isinstance(data, dict) else None
    except (ValueError, AttributeError, PeanchorError):
        return None


def model_digest(path: str | os.PathLike[str]) -> str:
    """A content hash of a model file (or a run directory's ``model.safetensors``): ties an analysis to its weights."""
    h = hashlib.blake2b(digest_size=16)
    with open(resolve_model_path(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


__all__ = [
    "FORMAT",
    "MODEL_FILE",
    "load_model",
    "model_digest",
    "read_checkpoint",
    "read_metadata",
    "safetensors_bytes",
    "save_model",
    "unwrap_model",
    "write_safetensors",
]
