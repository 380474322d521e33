"""A dataset over a uint8 image array ``(N, 3, H, W)`` held in memory or memory-mapped from a ``.npy``.

Used by scenes, CIFAR and prepared datasets. Items are resized to ``S`` (eval preprocessing) and
augmented in batches: the DataLoader calls ``__getitems__`` with a whole batch of indices, so one
fancy-index read and one vectorised augmentation serve the batch. Training takes the augmentation off
the dataset altogether (:func:`defer_augmentation`) and runs it on the device batch instead.

Imports: torch, numpy; :mod:`peanchor.data.transforms`.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Subset
from torchvision.transforms.v2 import functional as TF

from peanchor.data.transforms import batch_augment


class ArrayDataset(Dataset):
    """uint8 images ``(N, 3, H, W)`` and int labels; yields ``(uint8 (3, S, S), int)``.

    ``path``: the ``.npy`` the images are memory-mapped from. When set, pickling (DataLoader workers
    under spawn) sends the path, not the pixels, and each worker maps the file itself.
    """

    def __init__(
        self,
        images: np.ndarray,
        labels: np.ndarray | Sequence[int],
        *,
        img_size: int,
        policy: str = "none",
        classes: Sequence[str] = (),
        path: str | os.PathLike[str] | None = None,
    ) -> None:
        if images.ndim != 4 or images.shape[1] != 3 or images.dtype != np.uint8:
            raise ValueError(f"expected uint8 images (N, 3, H, W), got {images.dtype} {images.shape}")
        self.images = images
        self.labels = np.asarray(labels, dtype=np.int64)
        if len(self.labels) != len(images):
            raise ValueError(f"{len(images)} images but {len(self.labels)} labels")
        self.img_size = img_size
        self.policy = policy
        self.classes = list(classes)
        self.path = None if path is None else str(path)

    def __len__(self) -> int:
        return len(self.labels)

    def fetch(self, indices: Sequence[int] | np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch: uint8 ``(B, 3, S, S)`` (resized, augmented) and int64 labels ``(B,)``."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        batch = torch.from_numpy(self.images[idx])  # fancy indexing copies out of the memory map  # (B, 3, H, W)
        if batch.shape[-2:] != (self.img_size, self.img_size):
            batch = TF.resize(batch, [self.img_size, self.img_size], antialias=True)  # (B, 3, S, S)
        batch = batch_augment(batch, self.policy)
        return batch, torch.from_numpy(self.labels[idx])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} images")
        images, labels = self.fetch([index % len(self)])
        return images[0], int(labels[0])

    def __getitems__(self, indices: Sequence[int]) -> list[tuple[torch.Tensor, int]]:
        images, labels = self.fetch(indices)
        return [(img, int(lab)) for img, lab in zip(images, labels.tolist())]

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        if self.path is not None:
            state["images"] = None  # re-mapped in __setstate__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.images is None:
            self.images = np.load(self.path, mmap_mode="r")


def defer_augmentation(dataset: Dataset) -> tuple[Dataset, str]:
    """``(dataset without its batch augmentation, that policy)`` for an :class:`ArrayDataset` or a ``Subset`` of
    one, so that the caller applies :func:`~peanchor.data.transforms.batch_augment` to the device batch; any
    other dataset (image files, which augment per item) comes back unchanged, with ``"none"``.

    >>> ds = ArrayDataset(np.zeros((4, 3, 8, 8), np.uint8), [0, 1, 0, 1], img_size=8, policy="flip")
    >>> plain, policy = defer_augmentation(Subset(ds, [0, 2]))
    >>> policy, plain.dataset.policy, ds.policy
    ('flip', 'none', 'flip')
    """
    if isinstance(dataset, Subset):
        inner, policy = defer_augmentation(dataset.dataset)
        return Subset(inner, dataset.indices), policy
    if isinstance(dataset, ArrayDataset) and dataset.policy != "none":
        plain = copy.copy(dataset)  # shares the (memory-mapped) images
        plain.policy = "none"
        return plain, dataset.policy
    return dataset, "none"
