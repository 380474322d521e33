"""CIFAR-10 / CIFAR-100 from the "python version" archives already extracted under ``root``.

The batch files are pickles. They are read with an unpickler that only admits the few numpy
globals an array needs, so a tampered file cannot run code. peanchor never downloads.

Imports: torch, numpy; :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from peanchor.core.errors import DataError

URL = "https://www.cs.toronto.edu/~kriz/cifar.html"


@dataclass(frozen=True)
class CifarFormat:
    folder: str
    train: tuple[str, ...]
    test: str
    meta: str
    labels_key: str
    names_key: str


FORMATS = {
    "cifar10": CifarFormat(
        "cifar-10-batches-py",
        tuple(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
        "batches.meta",
        "labels",
        "label_names",
    ),
    "cifar100": CifarFormat("cifar-100-python", ("train",), "test", "meta", "fine_labels", "fine_label_names"),
}

_ALLOWED_GLOBALS = {
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("_codecs", "encode"),  # how protocol-2 pickles written by Python 3 spell bytes
}


class _ArrayUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"refusing to load {module}.{name}")
        if module.startswith("numpy.core.") and hasattr(np, "_core"):
            module = "numpy._core." + module.split(".", 2)[2]  # numpy >= 2 moved numpy.core
        return super().find_class(module, name)


def _load_batch(path: Path) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            raw = _ArrayUnpickler(f, encoding="latin1").load()
    except FileNotFoundError:
        raise
    except (OSError, pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as e:
        raise DataError(f"{path} is not a readable CIFAR batch file: {e}") from e
    if not isinstance(raw, dict):
        raise DataError(f"{path} is not a CIFAR batch file: expected a dict, found {type(raw).__name__}")
    return {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in raw.items()}


def _folder(root: str | None, name: str) -> Path:
    fmt = FORMATS[name]
    files = "data_batch_1..5, test_batch, batches.meta" if name == "cifar10" else "train, test, meta"
    hint = f"put the extracted python-version archive ({fmt.folder}, from {URL}) there; peanchor never downloads"
    if not root:
        raise DataError(f"dataset {name!r} needs data.root: the folder that holds {fmt.folder}/ ({hint})")
    base = Path(root).expanduser()
    for candidate in (base / fmt.folder, base):  # accept the parent or the extracted folder itself
        if (candidate / fmt.test).is_file():
            return candidate
    raise DataError(f"{name} not found under {base}: expected {base / fmt.folder} holding {files}; {hint}")


def load_cifar_split(root: str | None, name: str, *, train: bool) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """uint8 images ``(N, 3, 32, 32)``, int64 labels and class names of one split."""
    fmt = FORMATS[name]
    folder = _folder(root, name)
    images, labels = [], []
    for file in fmt.train if train else (fmt.test,):
        path = folder / file
        if not path.is_file():
            raise DataError(f"{path} is missing: {folder} should hold {', '.join(fmt.train + (fmt.test, fmt.meta))}")
        batch = _load_batch(path)
        try:
            data = np.asarray(batch["data"], dtype=np.uint8).reshape(-1, 3, 32, 32)  # rows are R, G, B planes
            images.append(data)
            labels.append(np.asarray(batch[fmt.labels_key], dtype=np.int64))
        except (KeyError, ValueError) as e:
            raise DataError(f"{path} is not a {name} batch (no usable 'data'/'{fmt.labels_key}': {e})") from e
        if len(labels[-1]) != len(data):
            raise DataError(f"{path} holds {len(data)} images but {len(labels[-1])} labels")
    meta_path = folder / fmt.meta
    if not meta_path.is_file():
        raise DataError(f"{meta_path} is missing: it holds the class names of {name}")
    meta = _load_batch(meta_path)
    classes = [str(c) for c in meta.get(fmt.names_key, [])]
    all_labels = np.concatenate(labels)
    if not classes or all_labels.min() < 0 or all_labels.max() >= len(classes):
        raise DataError(f"{meta_path}: '{fmt.names_key}' does not name every label in {folder}")
    return np.concatenate(images), all_labels, classes
