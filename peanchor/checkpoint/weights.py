"""Weights files: reading a state dict without running code, and loading it strictly with a one-line diff.

One module for every source of weights: our model files (:mod:`peanchor.checkpoint.files`), timm weights
(:mod:`peanchor.adapters.timm_vit`) and the paper's released ``torch.save`` files (:mod:`peanchor.convert.paper`).

* ``.safetensors`` files are read with safetensors after a look at the raw header: a pickle or zip archive named
  ``.safetensors`` and a torn file are refused before a byte of them is interpreted.
* Anything else is read with ``torch.load(weights_only=True)`` only, so a file that needs arbitrary unpickling (a
  class or callable outside torch's allow-list) is refused before any of its code runs.
* A state dict may be bare or nested under a training script's key (``model``, ``state_dict``, ...), and
  wrapper prefixes that every key shares (DDP's ``module.``, ``torch.compile``'s ``_orig_mod.``) are removed.
* :func:`load_strict` loads with ``strict=True`` after naming, in one line, every missing, unexpected or
  mis-shaped tensor.

Imports: torch, safetensors and :mod:`peanchor.core.errors` only.
"""

from __future__ import annotations

import os
import pickle
import re
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from torch import Tensor, nn

from peanchor.core.errors import CheckpointError

__all__ = [
    "NESTED_KEYS",
    "WRAPPER_PREFIXES",
    "check_safetensors_header",
    "extract_state_dict",
    "few",
    "file_format",
    "load_pickled",
    "load_strict",
    "read_safetensors",
    "read_state_dict",
    "state_dict_diff",
    "strip_wrapper_prefixes",
]

# Where training scripts nest the state dict inside a torch.save'd dict, in order of preference.
NESTED_KEYS: tuple[str, ...] = ("model", "state_dict", "model_state_dict", "model_ema", "state_dict_ema")
# Prefixes that wrappers add to every key: DataParallel / DDP, torch.compile.
WRAPPER_PREFIXES: tuple[str, ...] = ("module.", "_orig_mod.")

# The largest safetensors header we accept (the format itself caps it at 100 MB).
_MAX_HEADER = 100_000_000


def few(names: Sequence[str], n: int = 4) -> str:
    """The first ``n`` names, then how many more.

    >>> few(["a", "b", "c"], 2), few(["a"])
    ('a, b and 1 more', 'a')
    """
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# ----------------------------------------------------------------------------------------------
# Reading


def _head(p: Path) -> tuple[bytes, int]:
    try:
        size = p.stat().st_size
        with open(p, "rb") as f:
            return f.read(9), size  # the header length (u64, little-endian), then the header's opening "{"
    except OSError as e:
        raise CheckpointError(f"cannot read checkpoint {p}: {e.strerror or e}") from e


def _plausible_safetensors(head: bytes, size: int) -> bool:
    header_len = struct.unpack("<Q", head[:8])[0] if len(head) >= 8 else -1
    return 0 <= header_len <= _MAX_HEADER and 8 + header_len <= size and head[8:9] == b"{"


def file_format(path: str | os.PathLike[str]) -> str:
    """What a weights file is, from its first bytes alone: ``"safetensors"``, ``"zip"`` (``torch.save``'s
    format), ``"pickle"`` (a legacy ``torch.save`` or a plain pickle) or ``"unknown"``."""
    head, size = _head(Path(path))
    if _plausible_safetensors(head, size):
        return "safetensors"
    if head[:4] == b"PK\x03\x04":
        return "zip"
    if head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05"):
        return "pickle"  # the PROTO opcode of pickle protocols 2-5
    return "unknown"


def check_safetensors_header(path: str | os.PathLike[str]) -> None:
    """Refuse pickles/zip archives and torn files by looking at the raw bytes only."""
    p = Path(path)
    head, size = _head(p)
    plausible = _plausible_safetensors(head, size)
    # A length whose low byte is 0x80 also starts like a pickle, hence "implausible and pickle-like".
    if not plausible and (head[:2] == b"PK" or head[:1] == b"\x80"):
        raise CheckpointError(
            f"{p} is a pickle/torch.save file, not safetensors; peanchor never unpickles checkpoints "
            "(for the paper's released checkpoints use `peanchor import`)"
        )
    if len(head) < 8:
        raise CheckpointError(f"{p} is not a safetensors file (only {size} bytes: empty or truncated)")
    if not plausible:
        raise CheckpointError(f"{p} is not a safetensors file, or it is truncated (bad header length)")


def read_safetensors(
    path: str | os.PathLike[str], device: str | torch.device = "cpu", *, tensors: bool = True
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tensors (none with ``tensors=False``) and metadata of a safetensors file; damage is a :class:`CheckpointError`."""
    p = Path(path)
    check_safetensors_header(p)
    try:
        with safe_open(str(p), framework="pt", device=str(device)) as f:
            metadata = dict(f.metadata() or {})
            out = {k: f.get_tensor(k) for k in f.keys()} if tensors else {}  # noqa: SIM118 (not a dict)
    except Exception as e:  # safetensors raises its own error types (and OSError) for torn files
        raise CheckpointError(f"{p} is not a readable safetensors file (truncated or corrupt: {_first_line(e)})") from e
    return out, metadata


def load_pickled(path: str | os.PathLike[str], expected: str = "a torch.save file of a state dict") -> Any:
    """``torch.load(path, weights_only=True)``: tensors and plain containers, never code.

    A file that is not a ``torch.save`` file at all (a safetensors file, random bytes) is refused by its first
    bytes, with a line naming it and saying what was ``expected``.
    """
    p = Path(path)
    kind = file_format(p)
    if kind == "safetensors":
        raise CheckpointError(f"{p} is a safetensors file, not a torch.save file; expected {expected}")
    if kind == "unknown":
        head, size = _head(p)
        shown = f"it starts with bytes {head[:8].hex(' ')}" if size else "it is empty"
        raise CheckpointError(
            f"{p} is neither a torch.save file (a zip archive or a pickle) nor safetensors ({shown}); expected {expected}"
        )
    try:
        return torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        culprit = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f"it references {culprit.group(1)}" if culprit else "it holds objects other than tensors"
        raise CheckpointError(
            f"{p} needs unsafe unpickling ({what}); refusing to unpickle it: peanchor reads torch files with "
            "torch.load(weights_only=True) only and never runs code from a file. Re-save its state dict with "
            "torch.save(model.state_dict(), path) or as .safetensors"
        ) from None
    except Exception as e:  # zip / storage errors of truncated or foreign files
        raise CheckpointError(f"{p} is not a readable torch.save file (truncated or corrupt? {_first_line(e)})") from None


def _is_state_dict(obj: Any) -> bool:
    return isinstance(obj, Mapping) and len(obj) > 0 and all(
        isinstance(k, str) and isinstance(v, Tensor) for k, v in obj.items()
    )


def strip_wrapper_prefixes(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """``sd`` without the :data:`WRAPPER_PREFIXES` that every one of its keys shares.

    >>> list(strip_wrapper_prefixes({"module._orig_mod.w": torch.zeros(1)}))
    ['w']
    """
    out = dict(sd)
    for prefix in WRAPPER_PREFIXES:
        if out and all(k.startswith(prefix) for k in out):
            out = {k[len(prefix) :]: v for k, v in out.items()}
    return out


def extract_state_dict(
    obj: Any, path: str | os.PathLike[str], nested_keys: Sequence[str] = NESTED_KEYS
) -> dict[str, Tensor]:
    """The state dict in a loaded object: ``obj`` itself, or its first ``nested_keys`` entry that is one;
    wrapper prefixes stripped."""
    if not _is_state_dict(obj):
        if not isinstance(obj, Mapping):
            raise CheckpointError(f"{path} holds a {type(obj).__name__}, not a state dict (name → tensor entries)")
        nested = [obj[k] for k in nested_keys if k in obj and _is_state_dict(obj[k])]
        if not nested:
            present = [k for k in nested_keys if k in obj]
            if present:
                raise CheckpointError(f"{path}: its {present[0]!r} entry is not a state dict of tensors")
            raise CheckpointError(
                f"{path} holds no state dict (keys: {few(sorted(map(str, obj)))}); expected name → tensor entries, "
                f"or a dict with one of {', '.join(repr(k) for k in nested_keys)}"
            )
        obj = nested[0]
    return strip_wrapper_prefixes(obj)


def read_state_dict(
    path: str | os.PathLike[str], nested_keys: Sequence[str] = NESTED_KEYS
) -> dict[str, Tensor]:
    """The tensors of a local weights file: safetensors for ``.safetensors``, else ``torch.load(weights_only=True)``
    of a bare or nested state dict (see :func:`extract_state_dict`)."""
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"weights file {p} does not exist" if not p.exists() else f"{p} is not a file")
    if p.suffix.lower() == ".safetensors":
        tensors, _ = read_safetensors(p)
        return strip_wrapper_prefixes(tensors)
    return extract_state_dict(load_pickled(p), p, nested_keys)


# ----------------------------------------------------------------------------------------------
# Loading


def state_dict_diff(expected: Mapping[str, Tensor], got: Mapping[str, Tensor]) -> str | None:
    """One line naming the tensors of ``got`` that do not fit ``expected`` (None when every name and shape fits).

    >>> state_dict_diff({"w": torch.zeros(2), "b": torch.zeros(1)}, {"w": torch.zeros(3), "x": torch.zeros(1)})
    'missing b; unexpected x; shape mismatch w (3,) in the file vs (2,) in the model'
    """
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shapes = [
        f"{k} {tuple(got[k].shape)} in the file vs {tuple(v.shape)} in the model"
        for k, v in expected.items()
        if k in got and tuple(got[k].shape) != tuple(v.shape)
    ]
    parts = [f"missing {few(missing)}"] if missing else []
    parts += [f"unexpected {few(unexpected)}"] if unexpected else []
    parts += [f"shape mismatch {few(shapes, 2)}"] if shapes else []
    return "; ".join(parts) or None


def load_strict(model: nn.Module, sd: Mapping[str, Tensor], context: str, hint: str = "") -> None:
    """``model.load_state_dict(sd, strict=True)``, or a :class:`CheckpointError` ``"<context>: <diff><hint>"``."""
    diff = state_dict_diff(model.state_dict(), sd)
    if diff is not None:
        raise CheckpointError(f"{context}: {diff}{hint}")
    model.load_state_dict(sd, strict=True)
