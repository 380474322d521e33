"""Datasets for peanchor: the embedded ``scenes`` default and loaders for real data on local disk.

Every dataset yields ``(uint8 tensor (3, S, S), int label)`` already at the model resolution ``S``
(train: light augmentation; eval: ``Resize((S, S))`` as in the paper). Normalisation happens on the
device, in one batched step, with :func:`normalize`. Nothing here ever downloads.

>>> train, val, info = build_datasets(DataSpec(train_size=100, val_size=100))  # doctest: +SKIP
>>> image, label = val[0]; image.shape, image.dtype  # doctest: +SKIP
(torch.Size([3, 32, 32]), torch.uint8)

The specs (:mod:`peanchor.data.spec`: the training config's schema reads them) load without torch; everything else
(:mod:`peanchor.data.datasets`, which holds ``DATASETS`` and the builders) is imported on first use.

Imports: its own modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from peanchor.data.spec import AUGMENT_POLICIES, DataInfo, DataSpec

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.data.datasets import (
        DATASETS,
        IMAGENET_MEAN,
        IMAGENET_STD,
        SCENES_CLASSES,
        ArrayDataset,
        batch_augment,
        build_datasets,
        build_eval_dataset,
        decode_throughput,
        defer_augmentation,
        eval_transform,
        generate_scenes,
        materialize_imagenet100,
        normalization,
        normalize,
        prepare_dataset,
        read_class_list,
        resolve_augment,
        save_sample_grid,
        train_transform,
    )

__all__ = [
    "AUGMENT_POLICIES",
    "DATASETS",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "SCENES_CLASSES",
    "ArrayDataset",
    "DataInfo",
    "DataSpec",
    "batch_augment",
    "build_datasets",
    "build_eval_dataset",
    "decode_throughput",
    "defer_augmentation",
    "eval_transform",
    "generate_scenes",
    "materialize_imagenet100",
    "normalization",
    "normalize",
    "prepare_dataset",
    "read_class_list",
    "resolve_augment",
    "save_sample_grid",
    "train_transform",
]

_SPEC = frozenset({"AUGMENT_POLICIES", "DataInfo", "DataSpec"})


def __getattr__(name: str) -> Any:  # the rest of the public names, from peanchor.data.datasets on first use (torch)
    if name in __all__ and name not in _SPEC:
        value = getattr(importlib.import_module("peanchor.data.datasets"), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peanchor.data' has no attribute {name!r}")
