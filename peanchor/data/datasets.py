"""The datasets' builders (registered in :data:`~peanchor.data.registry.DATASETS`: the embedded ``scenes`` default
and loaders for real data on local disk),
building them from a :class:`DataSpec` (:func:`build_datasets`, :func:`build_eval_dataset`), and the batched
normalisation on the device (:func:`normalize`); :mod:`peanchor.data` hands these out (its docstring says what a
dataset yields).

Imports: torch, numpy; its own modules and :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from peanchor.data import cifar, folder, hf, imagenet100, scenes
from peanchor.data.arrays import ArrayDataset
from peanchor.data.prepared import read_meta
from peanchor.data.registry import DATASETS
from peanchor.data.scenes import SCENES_CLASSES
from peanchor.data.spec import DataInfo, DataSpec
from peanchor.data.transforms import IMAGENET_MEAN, IMAGENET_STD, eval_transform, resolve_augment, train_transform
from peanchor.core.errors import ConfigError, DataError, did_you_mean

__all__ = ["DATASETS", "build_datasets", "build_eval_dataset", "normalization", "normalize"]

Builder = Callable[[DataSpec, bool], "tuple[Dataset | None, Dataset, DataInfo]"]


def normalize(
    images: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...], dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """uint8 images ``(..., 3, H, W)`` -> float ``(x / 255 - mean) / std``, on the images' device.

    >>> x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    >>> normalize(x, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)).unique().tolist()
    [1.0]
    """
    if images.dtype != torch.uint8:
        raise ValueError(f"normalize expects uint8 images, got {images.dtype}")
    m = torch.as_tensor(mean, dtype=dtype, device=images.device).view(-1, 1, 1)  # (3, 1, 1)
    s = torch.as_tensor(std, dtype=dtype, device=images.device).view(-1, 1, 1)
    return images.to(dtype).div_(255.0).sub_(m).div_(s)  # (..., 3, H, W)


def normalization(spec: DataSpec) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The ``(mean, std)`` a dataset's images are normalised with, without building it: ImageNet's for every
    dataset but a prepared one, whose ``meta.json`` records its own (a missing one is a :class:`DataError`)."""
    if spec.name == "prepared" and spec.root:
        meta = read_meta(spec.root)
        return tuple(float(v) for v in meta["mean"]), tuple(float(v) for v in meta["std"])
    return IMAGENET_MEAN, IMAGENET_STD


def _info(name: str, classes: list[str], img_size: int) -> DataInfo:
    return DataInfo(len(classes), img_size, IMAGENET_MEAN, IMAGENET_STD, list(classes), name)


def _build_scenes(spec: DataSpec, train: bool) -> tuple[Dataset | None, Dataset, DataInfo]:
    size = spec.img_size

    def split(name: str, n: int | None, policy: str) -> ArrayDataset:
        images, labels, path = scenes.load_scenes(
            n or scenes.DEFAULT_SIZES[name], img_size=size, seed=spec.seed, split=name, cache=spec.cache_dir
        )
        return ArrayDataset(images, labels, img_size=size, policy=policy, classes=SCENES_CLASSES, path=path)

    val = split("val", spec.val_size, "none")
    train_ds = split("train", spec.train_size, resolve_augment("scenes", spec.augment, size)) if train else None
    return train_ds, val, _info("scenes", list(SCENES_CLASSES), size)


def _build_files(
    name: str, spec: DataSpec, classes: list[str], train_samples: list | None, val_samples: list
) -> tuple[Dataset | None, Dataset, DataInfo]:
    size = spec.img_size
    val = folder.FolderDataset(val_samples, classes, eval_transform(size))
    train_ds = None
    if train_samples is not None:
        train_ds = folder.FolderDataset(
            train_samples, classes, train_transform(resolve_augment(name, spec.augment, size), size)
        )
    return train_ds, val, _info(name, classes, size)


def _build_imagefolder(spec: DataSpec, train: bool) -> tuple[Dataset | None, Dataset, DataInfo]:
    root = folder.folder_root(spec.root, "imagefolder")
    classes, train_samples, val_samples = folder.imagefolder_samples(root, train=train)
    return _build_files("imagefolder", spec, classes, train_samples, val_samples)


def _build_imagenet100(spec: DataSpec, train: bool) -> tuple[Dataset | None, Dataset, DataInfo]:
    root = folder.folder_root(spec.root, "imagenet100", imagenet100.LAYOUT)
    classes, train_samples, val_samples = imagenet100.imagenet100_samples(root, spec.class_list, train=train)
    return _build_files("imagenet100", spec, classes, train_samples, val_samples)


def _cifar_builder(name: str) -> Builder:
    def build(spec: DataSpec, train: bool) -> tuple[Dataset | None, Dataset, DataInfo]:
        size = spec.img_size
        images, labels, classes = cifar.load_cifar_split(spec.root, name, train=False)
        val = ArrayDataset(images, labels, img_size=size, policy="none", classes=classes)
        train_ds = None
        if train:
            images, labels, _ = cifar.load_cifar_split(spec.root, name, train=True)
            train_ds = ArrayDataset(
                images, labels, img_size=size, policy=resolve_augment(name, spec.augment, size), classes=classes
            )
        return train_ds, val, _info(name, classes, size)

    return build


def _build_hf(spec: DataSpec, train: bool) -> tuple[Dataset | None, Dataset, DataInfo]:
    size = spec.img_size
    train_rows, val_rows = hf.load_hf_splits(
        root=spec.root, name=spec.hf_name, train_split=spec.hf_train_split, val_split=spec.hf_val_split, train=train
    )
    source = spec.hf_name or str(spec.root)
    classes = hf.hf_classes(val_rows if train_rows is None else train_rows, spec.label_column, source)
    val = hf.HFImageDataset(val_rows, spec.image_column, spec.label_column, eval_transform(size))
    train_ds = None
    if train_rows is not None:
        policy = resolve_augment("hf", spec.augment, size)
        train_ds = hf.HFImageDataset(train_rows, spec.image_column, spec.label_column, train_transform(policy, size))
    return train_ds, val, _info("hf", classes, size)


for _name, _build in (("scenes", _build_scenes), ("imagefolder", _build_imagefolder),
                      ("cifar10", _cifar_builder("cifar10")), ("cifar100", _cifar_builder("cifar100")),
                      ("imagenet100", _build_imagenet100), ("hf", _build_hf)):  # fmt: skip
    DATASETS.register(_build, name=_name)  # "prepared": peanchor.data.prepared's build_prepared (data/registry.py)


def _builder(spec: DataSpec) -> Builder:
    spec.validate()
    if spec.name not in DATASETS:
        raise ConfigError(f"unknown dataset {spec.name!r}; valid: {', '.join(DATASETS)}"
                          + did_you_mean(spec.name, DATASETS))  # fmt: skip
    return DATASETS[spec.name]


def _subset(dataset: Dataset, n: int | None, seed: int, key: str) -> Dataset:
    """A seeded random subset of ``n`` items (kept in index order), or ``dataset`` when ``n`` is None."""
    if n is None or n == len(dataset):
        return dataset
    if n > len(dataset):
        raise DataError(f"data.{key}={n} but the split holds only {len(dataset)} images")
    picks = np.sort(np.random.default_rng([seed, len(dataset)]).choice(len(dataset), n, replace=False))
    return Subset(dataset, picks.tolist())


def build_datasets(spec: DataSpec) -> tuple[Dataset, Dataset, DataInfo]:
    """``(train, val, info)`` for ``spec``; see :data:`DATASETS` for the names."""
    train, val, info = _builder(spec)(spec, True)
    assert train is not None
    if spec.name != "scenes":  # scenes generates exactly train_size/val_size images
        train = _subset(train, spec.train_size, spec.seed, "train_size")
        val = _subset(val, spec.val_size, spec.seed, "val_size")
    return train, val, info


def build_eval_dataset(spec: DataSpec) -> tuple[Dataset, DataInfo]:
    """``(val, info)`` without touching the train split (no generation, decoding or scanning of it)."""
    _, val, info = _builder(spec)(spec, False)
    if spec.name != "scenes":
        val = _subset(val, spec.val_size, spec.seed, "val_size")
    return val, info
