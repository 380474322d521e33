"""Hugging Face datasets, strictly offline: a ``save_to_disk`` folder or a dataset already in the local cache.

Optional: needs ``pip install 'peanchor[hf]'``. Rows are read through any object with
``__len__``/``__getitem__`` returning dicts (a ``datasets.Dataset``); the image column may hold
PIL images, ``{"bytes": ..., "path": ...}`` dicts or arrays.

Imports: torch, ``datasets`` (lazily); :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import io
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision.transforms.v2 import functional as TF

from peanchor.core.errors import DataError


def import_datasets() -> Any:
    """The ``datasets`` module, configured offline; a :class:`DataError` with the install hint if absent."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise DataError("dataset 'hf' needs the Hugging Face datasets package: pip install 'peanchor[hf]'") from None
    for flag in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"):  # in case it was imported before, online
        if hasattr(datasets.config, flag):
            setattr(datasets.config, flag, True)
    return datasets


def load_hf_splits(
    *, root: str | None, name: str | None, train_split: str, val_split: str, train: bool
) -> tuple[Any | None, Any]:
    """``(train rows or None, val rows)`` from a save_to_disk folder (``root``) or the cache (``name``)."""
    datasets = import_datasets()
    if name:
        where = f"the HF cache {root}" if root else "the default HF cache"
        try:
            splits = datasets.load_dataset(name, cache_dir=root or None)
        except Exception as e:  # noqa: BLE001 - datasets raises many types; all mean "not available offline"
            raise DataError(
                f"HF dataset {name!r} is not in {where}; peanchor loads offline only ({type(e).__name__}: {e})"
            ) from e
        source = f"HF dataset {name!r}"
    elif root:
        path = Path(root).expanduser()
        if not path.exists():
            raise DataError(f"{path} does not exist: expected a folder written by datasets' save_to_disk")
        try:
            splits = datasets.load_from_disk(str(path))
        except (FileNotFoundError, ValueError, OSError) as e:
            raise DataError(
                f"{path} is not a dataset saved with datasets' save_to_disk (no dataset_dict.json or state.json in it): "
                "expected a DatasetDict.save_to_disk folder with a train and a validation split, or set data.hf_name "
                "to read one from the local HF cache"
            ) from e
        source = str(path)
    else:
        raise DataError(
            "dataset 'hf' needs data.root (a save_to_disk folder) or data.hf_name (a dataset in the local HF cache)"
        )
    if not hasattr(splits, "keys"):
        raise DataError(f"{source} holds a single split; expected a DatasetDict with '{train_split}' and '{val_split}'")
    available = list(splits.keys())
    for split in ([train_split] if train else []) + [val_split]:
        if split not in available:
            raise DataError(
                f"{source} has no split {split!r} (it has {', '.join(available)}); set data.hf_train_split/hf_val_split"
            )
    return (splits[train_split] if train else None), splits[val_split]


def hf_classes(rows: Any, label_column: str, source: str) -> list[str]:
    """Class names from a ClassLabel feature, else ``"0".."K-1"`` from the labels present."""
    columns = list(getattr(rows, "column_names", []) or [])
    if columns and label_column not in columns:
        raise DataError(
            f"{source} has no label column {label_column!r} (columns: {', '.join(columns)}); set data.label_column"
        )
    feature = (getattr(rows, "features", None) or {}).get(label_column)
    names = getattr(feature, "names", None)
    if names:
        return [str(n) for n in names]
    labels = np.asarray(rows[label_column])
    return [str(i) for i in range(int(labels.max()) + 1)]


def to_uint8_image(value: Any) -> torch.Tensor:
    """A HF image cell (PIL image, {"bytes"/"path"} dict, or HWC array) as uint8 RGB ``(3, H, W)``."""
    from PIL import Image

    if isinstance(value, dict):
        if value.get("bytes"):
            value = Image.open(io.BytesIO(value["bytes"]))
        elif value.get("path"):
            value = Image.open(value["path"])
    if isinstance(value, Image.Image):
        return TF.pil_to_tensor(value.convert("RGB"))
    array = np.asarray(value)
    if array.ndim == 2:
        array = np.repeat(array[:, :, None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] not in (3, 4):
        raise ValueError(f"unsupported image cell of shape {array.shape}")
    return torch.from_numpy(np.ascontiguousarray(array[:, :, :3].astype(np.uint8))).permute(2, 0, 1)


class HFImageDataset(Dataset):
    """``(uint8 (3, S, S), label)`` from HF rows; an undecodable row is skipped with a warning."""

    def __init__(
        self, rows: Any, image_column: str, label_column: str, transform: Callable[[torch.Tensor], torch.Tensor]
    ) -> None:
        columns = list(getattr(rows, "column_names", []) or [])
        if columns and image_column not in columns:
            raise DataError(
                f"the HF split has no image column {image_column!r} (columns: {', '.join(columns)}); "
                "set data.image_column"
            )
        if len(rows) == 0:
            raise DataError("the HF split holds no rows")
        self.rows = rows
        self.image_column, self.label_column = image_column, label_column
        self.transform = transform
        self._bad: set[int] = set()

    def __len__(self) -> int:
        return len(self.rows)

    def item_name(self, index: int) -> str:
        """The row behind item ``index`` (for messages about it)."""
        return f"HF row {index}"

    def read_item(self, index: int) -> tuple[torch.Tensor, int] | None:
        """Item ``index``, or None (with a warning naming the row, once) when its image cannot be decoded."""
        if index in self._bad:
            return None
        try:
            row = self.rows[index]
            image = to_uint8_image(row[self.image_column])
        except (OSError, ValueError, TypeError, SyntaxError) as e:
            self._bad.add(index)
            warnings.warn(f"skipping unreadable image in HF row {index} ({e})", stacklevel=3)
            return None
        return self.transform(image), int(row[self.label_column])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        # Training never stops on a bad row: it gets the next readable image instead.
        n = len(self.rows)
        for step in range(n):
            item = self.read_item((index + step) % n)
            if item is not None:
                return item
        raise DataError(f"none of the {n} HF rows could be decoded")
