"""The training and validation DataLoaders: keyed sample streams, persistent workers, pinned memory on CUDA, and
the batch augmentation of array datasets taken off the workers so that it runs on the device batch.

Image-file datasets (JPEG folders, HF) augment per item in the workers, each item from its own keyed stream
(:class:`~peanchor.training.sampling.SampleStreams`). Array datasets (scenes, CIFAR, prepared memmaps) only
read uint8 batches in the workers; :func:`peanchor.data.batch_augment` then runs on the device, keyed by
``(step, rank)``. Either way the worker count changes nothing but speed.

``train.num_workers`` is capped by the CPUs the process may use (:func:`cpu_share`): 8 workers on 2 CPUs load no
faster than 2 and hold 4 times the memory.

Workers ignore SIGTERM and SIGINT: under Slurm every process of a job step receives them, and a worker
dying first would break the main process's clean stop (torch raises in the main process as soon as a worker
dies). The main process therefore ends its workers itself (:func:`close_loader`), or they notice that it is
gone.

Imports: torch; :mod:`peanchor.data`, :mod:`peanchor.core.errors`, :mod:`peanchor.training.config`,
:mod:`peanchor.training.distributed`, :mod:`peanchor.training.sampling`.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

from torch.utils.data import DataLoader, Dataset, Subset

from peanchor.data import defer_augmentation
from peanchor.core.errors import ConfigError
from peanchor.training.config import TrainConfig
from peanchor.training.distributed import DistContext
from peanchor.training.sampling import EpochBatches, SampleStreams

__all__ = ["CELL_CPUS_ENV", "TrainData", "close_loader", "cpu_share", "train_data", "val_loader"]


def _worker_init(worker_id: int) -> None:
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, signal.SIG_IGN)


CELL_CPUS_ENV = "PEANCHOR_CELL_CPUS"  # set by ``reproduce`` for a cell's process: the CPUs that cell was given


def cpu_share() -> int:
    """The CPUs this process may use for its DataLoader workers: ``$PEANCHOR_CELL_CPUS`` (a ``reproduce`` cell's
    share of the job's CPUs), else this process's affinity mask (Slurm, taskset, a container), else the CPU count."""
    text = os.environ.get(CELL_CPUS_ENV, "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def _loader_options(config: TrainConfig, ctx: DistContext) -> dict[str, Any]:
    workers = min(config.train.num_workers, cpu_share())  # more workers than CPUs only cost memory
    options: dict[str, Any] = {"num_workers": workers, "pin_memory": ctx.device.type == "cuda"}
    if workers > 0:
        options.update(persistent_workers=True, prefetch_factor=4, worker_init_fn=_worker_init)
    return options


@dataclass
class TrainData:
    """The training loader and what the loop needs beside it."""

    loader: DataLoader
    batches: EpochBatches  # set_epoch(epoch, start) before iterating the loader
    device_augment: str  # the batch_augment policy to run on the device batch ("none": the items augment)
    size: int  # training images

    @property
    def steps_per_epoch(self) -> int:
        return self.batches.steps_per_epoch


def train_data(dataset: Dataset, config: TrainConfig, ctx: DistContext) -> TrainData:
    t = config.train
    if t.batch_size % ctx.world_size:
        raise ConfigError(
            f"train.batch_size={t.batch_size} must be divisible by the number of processes ({ctx.world_size})"
        )
    n = len(dataset)  # type: ignore[arg-type]
    if n < t.batch_size:
        raise ConfigError(
            f"the training set has {n} images, fewer than one batch of {t.batch_size}: "
            "lower train.batch_size or raise data.train_size"
        )
    plain, policy = defer_augmentation(dataset)
    streams = SampleStreams(plain, t.seed, random=policy == "none" and _augments_per_item(plain))
    batches = EpochBatches(n, t.batch_size, seed=t.seed, rank=ctx.rank, world_size=ctx.world_size)
    loader = DataLoader(streams, batch_sampler=batches, **_loader_options(config, ctx))
    return TrainData(loader=loader, batches=batches, device_augment=policy, size=n)


def _augments_per_item(dataset: Dataset) -> bool:
    """False for an array dataset without augmentation (its items are deterministic); True otherwise."""
    from peanchor.data import ArrayDataset

    inner = dataset.dataset if isinstance(dataset, Subset) else dataset
    return not (isinstance(inner, ArrayDataset) and inner.policy == "none")


def val_loader(dataset: Dataset, config: TrainConfig, ctx: DistContext) -> DataLoader:
    if ctx.enabled:  # an exact shard per rank (no padding, unlike DistributedSampler)
        dataset = Subset(dataset, range(ctx.rank, len(dataset), ctx.world_size))  # type: ignore[arg-type]
    return DataLoader(dataset, batch_size=config.train.eval_batch_size, shuffle=False, **_loader_options(config, ctx))


def close_loader(loader: DataLoader) -> None:
    """End ``loader``'s persistent workers now. They ignore SIGTERM, so the ``terminate()`` with which
    ``multiprocessing`` ends leftover children at exit would leave it waiting for them."""
    iterator = getattr(loader, "_iterator", None)  # the persistent workers' iterator (torch internals)
    shutdown = getattr(iterator, "_shutdown_workers", None)
    if shutdown is not None:
        shutdown()
    loader._iterator = None
