"""Datasets for peanchor: the embedded ``scenes`` default and loaders for real data on local disk.

Every dataset yields ``(uint8 tensor (3, S, S), int label)`` already at the model resolution ``S``
(train: light augmentation; eval: ``Resize((S, S))`` as in the paper). Normalisation happens on the
device, in one batched step, with :func:`normalize`. Nothing here ever downloads.

>>> train, val, info = build_datasets(DataSpec(train_size=100, val_size=100))  # doctest: +SKIP
>>> image, label = val[0]; image.shape, image.dtype  # doctest: +SKIP
(torch.Size([3, 32, 32]), torch.uint8)

The specs (:mod:`peanchor.data.spec`: the training config's schema reads them) load without torch; everything else
(:mod:`peanchor.data.datasets`, which holds the builders, and the modules of the datasets and the transforms) is
imported on first use. The registry of the datasets' names, :data:`DATASETS` (:mod:`peanchor.data.registry`),
loads without torch too: a builder's module is imported on its name's first lookup.

Imports: its own modules.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from peanchor.data.registry import DATASETS
from peanchor.data.spec import AUGMENT_POLICIES, DataInfo, DataSpec

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.data.arrays import ArrayDataset, defer_augmentation
    from peanchor.data.datasets import build_datasets, build_eval_dataset, normalization, normalize
    from peanchor.data.imagenet100 import materialize_imagenet100, read_class_list
    from peanchor.data.prepared import decode_throughput, prepare_dataset
    from peanchor.data.scenes import SCENES_CLASSES, generate_scenes, save_sample_grid
    from peanchor.data.transforms import (
        IMAGENET_MEAN,
        IMAGENET_STD,
        batch_augment,
        eval_transform,
        resolve_augment,
        train_transform,
    )

# module → its public names, imported on first use (torch)
_MODULES = {
    "datasets": ("build_datasets", "build_eval_dataset", "normalization", "normalize"),
    "arrays": ("ArrayDataset", "defer_augmentation"),
    "imagenet100": ("materialize_imagenet100", "read_class_list"),
    "prepared": ("decode_throughput", "prepare_dataset"),
    "scenes": ("SCENES_CLASSES", "generate_scenes", "save_sample_grid"),
    "transforms": ("IMAGENET_MEAN", "IMAGENET_STD", "batch_augment", "eval_transform", "resolve_augment",
                   "train_transform"),
}  # fmt: skip
_HOME = {name: f"peanchor.data.{module}" for module, names in _MODULES.items() for name in names}
__all__ = ["AUGMENT_POLICIES", "DATASETS", "DataInfo", "DataSpec", *_HOME]


def __getattr__(name: str) -> Any:  # the rest of the public names, from their modules on first use (torch)
    if name in _HOME:
        value = getattr(importlib.import_module(_HOME[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'peanchor.data' has no attribute {name!r}")
