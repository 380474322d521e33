"""The evaluation images, loaded once: a deterministic subset of a dataset's evaluation split as one uint8 tensor.

Imports: :mod:`peanchor.data`, :mod:`peanchor.analysis.shifts` (the pixel fingerprint), :mod:`peanchor.core.bars`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from peanchor.analysis.corrupted_sets import fingerprint
from peanchor.core.bars import progress_bar
from peanchor.core.errors import ConfigError, DataError

__all__ = ["EvalSet", "subset_indices"]


def subset_indices(n: int, max_images: int | None, seed: int = 0) -> Tensor:
    """Sorted indices of a deterministic random subset of ``max_images`` out of ``n`` (all if None or >= n).

    Random rather than the first ``max_images``: validation splits are often sorted by class.

    >>> subset_indices(5, None).tolist()
    [0, 1, 2, 3, 4]
    >>> idx = subset_indices(100, 10)
    >>> len(idx), idx.tolist() == sorted(set(idx.tolist())), torch.equal(idx, subset_indices(100, 10))
    (10, True, True)
    """
    if max_images is not None and (isinstance(max_images, bool) or max_images < 1):
        raise ConfigError(f"max_images={max_images!r}: expected a positive integer or None")
    if max_images is None or max_images >= n:
        return torch.arange(n)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    return perm[:max_images].sort().values


@dataclass
class EvalSet:
    """The evaluation images, loaded once: uint8 ``(N, 3, S, S)`` on the CPU, labels ``(N,)``.

    ``fingerprint`` identifies the exact pixels (it keys the corrupted copies in a
    :class:`~peanchor.analysis.shifts.CorruptedCache`). ``info`` is the dataset's
    :class:`~peanchor.data.DataInfo` (normalisation statistics, classes).
    """

    images: Tensor  # (N, 3, S, S) uint8
    labels: Tensor  # (N,) int64
    info: Any = None  # peanchor.data.DataInfo
    fingerprint: str = ""
    source: dict[str, Any] = field(default_factory=dict)  # how it was built (JSON-able)

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.dim() != 4 or self.images.shape[1] != 3:
            raise DataError(
                f"evaluation images must be uint8 (N, 3, S, S), got {self.images.dtype} {tuple(self.images.shape)}"
            )
        self.labels = torch.as_tensor(self.labels, dtype=torch.int64)
        if self.labels.shape != self.images.shape[:1]:
            raise DataError(f"{self.images.shape[0]} evaluation images but labels of shape {tuple(self.labels.shape)}")
        if self.images.shape[0] == 0:
            raise DataError("the evaluation set is empty")
        if not self.fingerprint:
            name = getattr(self.info, "name", "") or "eval"
            self.fingerprint = f"{name}-{self.img_size}px-n{len(self)}-{fingerprint(self.images)[:16]}"

    def __len__(self) -> int:
        return int(self.images.shape[0])

    @property
    def img_size(self) -> int:
        return int(self.images.shape[-1])

    @classmethod
    def from_tensors(cls, images: Tensor, labels: Tensor, info: Any = None, max_images: int | None = None) -> EvalSet:
        """Wrap tensors already in memory (a deterministic subset with ``max_images``)."""
        idx = subset_indices(int(images.shape[0]), max_images)
        if len(idx) < images.shape[0]:
            images, labels = images[idx], torch.as_tensor(labels)[idx]
        return cls(images.contiguous(), labels, info, source={"max_images": max_images})

    @classmethod
    def from_spec(cls, spec: Any, max_images: int | None = None, *, progress: bool | None = None) -> EvalSet:
        """Load the evaluation split described by a :class:`~peanchor.data.DataSpec` into memory."""
        from peanchor.data import build_eval_dataset

        dataset, info = build_eval_dataset(spec)
        n = len(dataset)
        if n == 0:
            raise DataError(f"the evaluation split of dataset {spec.name!r} is empty")
        idx = subset_indices(n, max_images)
        images, labels = _load_all(dataset, idx, progress)
        source = {"data": spec.to_dict() if hasattr(spec, "to_dict") else str(spec), "max_images": max_images}
        return cls(images, labels, info, source=source)


def _load_all(dataset: Any, idx: Tensor, progress: bool | None) -> tuple[Tensor, Tensor]:
    """Every item of ``dataset`` at ``idx`` as one uint8 tensor ``(N, 3, S, S)`` and labels ``(N,)``."""
    chunk = 512
    if hasattr(dataset, "fetch"):  # array-backed: one vectorised read per chunk
        parts = [dataset.fetch(idx[i : i + chunk].numpy()) for i in range(0, len(idx), chunk)]
        return torch.cat([p[0] for p in parts]), torch.cat([torch.as_tensor(p[1]) for p in parts])
    from torch.utils.data import DataLoader, Subset

    workers = min(8, os.cpu_count() or 1) if len(idx) > 2048 else 0
    loader = DataLoader(Subset(dataset, idx.tolist()), batch_size=chunk, num_workers=workers)
    images, labels = [], []
    for x, y in progress_bar(loader, desc="load eval set", unit="batch", show=progress, leave=False):
        images.append(x)
        labels.append(torch.as_tensor(y))
    return torch.cat(images), torch.cat(labels)
