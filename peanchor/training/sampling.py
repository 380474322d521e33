"""Which images a training step sees, and their random augmentation, as pure functions of where the run is.

* :class:`EpochBatches` (the loader's batch sampler): epoch *e* shuffles the whole training set with a
  generator keyed by ``(seed, e)``, the same on every rank, and cuts it into global batches of
  ``batch_size``; rank *r* of *w* takes the *r*-th of *w* equal slices of each. So step *k* sees the same
  images whatever the number of processes, and a resumed run can start at any step of an epoch.
* :class:`SampleStreams` (a dataset wrapper): item ``(e, i)`` is image *i* with its per-image augmentation
  drawn from torch's generator reseeded for ``(seed, e, i)``. Which DataLoader worker loads an image, and how
  many workers there are, no longer change a single pixel: resuming with another ``train.num_workers`` is
  exact, and workers can persist across epochs.

Batch augmentation on the device (array datasets) is keyed by ``(step, rank)`` in the loop itself.

Imports: torch; :mod:`peanchor.training.state` (``derive_seed``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import Dataset, Sampler

from peanchor.training.state import derive_seed

__all__ = ["EpochBatches", "SampleKey", "SampleStreams"]

SampleKey = tuple[int, int]  # (epoch, index into the training set)


class EpochBatches(Sampler[list[SampleKey]]):
    """One rank's batches of one epoch (``drop_last``: ``len(dataset) // batch_size`` steps).

    >>> a = EpochBatches(10, 4, seed=0, rank=0, world_size=2); b = EpochBatches(10, 4, seed=0, rank=1, world_size=2)
    >>> one = EpochBatches(10, 4, seed=0)
    >>> [sorted(x + y) for x, y in zip(a, b)] == [sorted(batch) for batch in one]  # the same global batches
    True
    >>> one.set_epoch(0, start=1); len(one), len(list(one))
    (1, 1)
    """

    def __init__(self, num_samples: int, batch_size: int, *, seed: int, rank: int = 0, world_size: int = 1) -> None:
        if batch_size % world_size:
            raise ValueError(f"batch size {batch_size} is not divisible by {world_size} processes")
        self.num_samples = num_samples
        self.batch_size = batch_size
        self.per_rank = batch_size // world_size
        self.seed, self.rank = seed, rank
        self.steps_per_epoch = num_samples // batch_size
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int, start: int = 0) -> None:
        """Iterate epoch ``epoch`` from its step ``start`` (0-based) on."""
        if not 0 <= start <= self.steps_per_epoch:
            raise ValueError(f"step {start} is outside an epoch of {self.steps_per_epoch} steps")
        self.epoch, self.start = epoch, start

    def order(self, epoch: int) -> torch.Tensor:
        """The epoch's permutation of the training set (the same on every rank)."""
        g = torch.Generator().manual_seed(derive_seed(self.seed, "order", epoch))
        return torch.randperm(self.num_samples, generator=g)

    def __len__(self) -> int:
        return self.steps_per_epoch - self.start

    def __iter__(self) -> Iterator[list[SampleKey]]:
        order = self.order(self.epoch)
        for step in range(self.start, self.steps_per_epoch):
            first = step * self.batch_size + self.rank * self.per_rank
            yield [(self.epoch, int(i)) for i in order[first : first + self.per_rank]]


class SampleStreams(Dataset):
    """``dataset`` indexed by :data:`SampleKey`; ``random`` marks a dataset that augments per item.

    For such a dataset every item is loaded with torch's global generator seeded from ``(seed, epoch, index)``
    (and the caller's generator state restored afterwards); a deterministic one is read as is, in batches
    when it supports ``__getitems__``.
    """

    def __init__(self, dataset: Dataset, seed: int, *, random: bool) -> None:
        self.dataset = dataset
        self.seed = seed
        self.random = random

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: SampleKey) -> Any:
        epoch, index = key
        if not self.random:
            return self.dataset[index]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(self.seed, "sample", epoch, index))
            return self.dataset[index]

    def __getitems__(self, keys: Sequence[SampleKey]) -> list[Any]:
        if not self.random and hasattr(self.dataset, "__getitems__"):
            return self.dataset.__getitems__([index for _, index in keys])  # type: ignore[no-any-return]
        return [self[key] for key in keys]
