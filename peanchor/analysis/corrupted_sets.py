"""Whole evaluation sets corrupted once: :func:`corrupt` (chunked, on the CPU) and :class:`CorruptedCache`, which
hands the same corrupted copy to every model and α (in memory, and optionally as memory-mapped ``.npy`` files).

Imports: :mod:`peanchor.core.fileio`, :mod:`peanchor.core.bars`, :mod:`peanchor.core.errors`. A shift is anything with ``name``,
``describe()`` and ``__call__(images, start_index=)``, e.g. :class:`peanchor.analysis.shifts.Shift`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from peanchor.core import fileio
from peanchor.core.bars import progress_bar
from peanchor.core.errors import ConfigError, DataError

__all__ = ["CorruptedCache", "check_batch", "corrupt", "fingerprint"]


def check_batch(images: torch.Tensor) -> None:
    """A uint8 image batch ``(B, C, H, W)``, or a TypeError / ValueError saying what it is instead."""
    if not isinstance(images, torch.Tensor):
        raise TypeError(f"expected a uint8 tensor (B, C, H, W), got {type(images).__name__}")
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise ValueError(
            f"expected a uint8 image batch (B, C, H, W), got dtype {images.dtype} and shape {tuple(images.shape)}"
        )


class _Corruption(Protocol):
    @property
    def name(self) -> str: ...

    def describe(self) -> dict[str, Any]: ...

    def __call__(self, images: torch.Tensor, *, start_index: int = 0) -> torch.Tensor: ...


def corrupt(
    images: torch.Tensor,
    shift: _Corruption,
    *,
    chunk_size: int = 256,
    progress: bool | None = None,
    out: torch.Tensor | None = None,
) -> torch.Tensor:
    """Apply ``shift`` to a uint8 set ``(N, C, H, W)`` in chunks, with a progress bar.

    Chunks are moved to the CPU first, so the result is the same on every machine (a GPU
    convolution may round differently). ``progress=None`` shows the bar only on a terminal.
    Returns ``out`` (allocated on the CPU when not given).
    """
    check_batch(images)
    if chunk_size < 1:
        raise ConfigError(f"chunk_size must be >= 1, got {chunk_size}")
    n = images.shape[0]
    if out is None:
        out = torch.empty(images.shape, dtype=torch.uint8)
    with progress_bar(total=n, desc=f"corrupt {shift.name}", unit="img", show=progress, leave=False) as bar:
        for start in range(0, n, chunk_size):
            chunk = images[start : start + chunk_size].to("cpu")  # (b, C, H, W)
            out[start : start + chunk.shape[0]] = shift(chunk, start_index=start).to(out.device)
            bar.update(chunk.shape[0])
    return out


def fingerprint(images: torch.Tensor) -> str:
    """A content hash of a tensor (shape, dtype and bytes): a cache key when none is given."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{tuple(images.shape)}|{images.dtype}".encode())
    flat = images.detach().to("cpu").contiguous().reshape(-1)
    step = 1 << 24
    for start in range(0, flat.numel(), step):
        h.update(flat[start : start + step].numpy().tobytes())
    return h.hexdigest()


def _slug(text: str, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")[:limit] or "set"


class CorruptedCache:
    """Corrupt each evaluation set once per shift and hand the same tensor to every model and α.

    ``get(clean, shift, key)`` returns the corrupted copy of ``clean`` (uint8 ``(N, C, H, W)``, on
    the CPU), memoised in memory under ``(key, shift)``. With ``cache_dir`` the result is also stored
    as ``<cache_dir>/<key>-<shift name>-<hash>.npy`` (atomic write) and later runs memory-map it
    instead of recomputing. ``key`` must identify the clean set (a dataset fingerprint, split and
    resolution); without one, :func:`fingerprint` hashes the tensor.

    The shift runs on the CPU, whatever the device of ``clean``, so cached files do not depend on the
    machine that made them.
    """

    def __init__(
        self,
        cache_dir: str | os.PathLike[str] | None = None,
        *,
        chunk_size: int = 256,
        progress: bool | None = None,
    ) -> None:
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.chunk_size = chunk_size
        self.progress = progress
        self._memory: dict[tuple[str, str], torch.Tensor] = {}

    def __len__(self) -> int:
        return len(self._memory)

    def clear(self) -> None:
        """Forget the in-memory copies (files on disk stay)."""
        self._memory.clear()

    @staticmethod
    def _shift_id(shift: _Corruption) -> str:
        return json.dumps(shift.describe(), sort_keys=True)

    def path_for(self, key: str, shift: _Corruption) -> Path | None:
        """Where the corrupted copy of set ``key`` under ``shift`` is stored on disk (``None`` without a cache dir)."""
        if self.cache_dir is None:
            return None
        digest = hashlib.blake2b(f"{key}\n{self._shift_id(shift)}".encode(), digest_size=6).hexdigest()
        return self.cache_dir / f"{_slug(key)}-{_slug(shift.name)}-{digest}.npy"

    def get(self, clean: torch.Tensor, shift: _Corruption, key: str | None = None) -> torch.Tensor:
        """The corrupted copy of ``clean`` (uint8 ``(N, C, H, W)``), computed at most once per key and shift."""
        check_batch(clean)
        key = fingerprint(clean) if key is None else str(key)
        memo_key = (key, self._shift_id(shift))
        hit = self._memory.get(memo_key)
        if hit is not None:
            if hit.shape != clean.shape:
                raise DataError(
                    f"cache key {key!r} was used for a set of shape {tuple(hit.shape)}, now {tuple(clean.shape)}; "
                    "give each evaluation set its own key"
                )
            return hit
        path = self.path_for(key, shift)
        result = self._load(path, clean) if path is not None and path.exists() else None
        if result is None:
            result = corrupt(clean, shift, chunk_size=self.chunk_size, progress=self.progress)
            if path is not None:
                array = result.numpy()
                fileio.atomic_write(path, lambda f: np.save(f, array, allow_pickle=False))
        self._memory[memo_key] = result
        return result

    @staticmethod
    def _load(path: Path, clean: torch.Tensor) -> torch.Tensor:
        try:
            # Copy-on-write map: lazily paged from disk, writable in memory, the file never changes.
            array = np.load(path, mmap_mode="c", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise DataError(f"cannot read the corruption cache file {path}: {e}; delete it to recompute") from e
        if array.dtype != np.uint8 or tuple(array.shape) != tuple(clean.shape):
            raise DataError(
                f"corruption cache file {path} holds {array.dtype} {tuple(array.shape)}, expected uint8 "
                f"{tuple(clean.shape)}; its key does not identify this set (use a distinct key, or delete the file)"
            )
        return torch.from_numpy(array)
