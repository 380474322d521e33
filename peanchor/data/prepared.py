"""Prepared datasets: decode any dataset once into memory-mapped uint8 arrays, then train from them.

``prepare_dataset(spec, out_dir)`` writes, per split, ``{split}.npy`` (uint8 ``(N, 3, S, S)``,
written in place through ``np.lib.format.open_memmap`` into a temporary name, then renamed) and
``{split}_labels.npy`` (int64 ``(N,)``), then ``meta.json`` last: a folder without ``meta.json``
is an interrupted preparation. A file that cannot be decoded is left out (each image is stored once), warned
about by name, and listed under ``skipped`` in ``meta.json``.

Both splits are stored exactly as the eval split is fed to the model: ``Resize((S, S),
antialias=True)`` of the decoded image. Training augmentation is applied afterwards, in batches,
on those S x S arrays (:func:`peanchor.data.transforms.batch_augment`); for ``rrc_flip`` that
means crops of the already-resized image are upsampled back to S, a little softer than cropping
the full-resolution file. That is the price of decoding once.

Imports: torch, numpy; :mod:`peanchor.data`, :mod:`peanchor.core.fileio`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Subset
from tqdm import tqdm

from peanchor.data.arrays import ArrayDataset
from peanchor.data.spec import DataInfo, DataSpec
from peanchor.data.transforms import resolve_augment
from peanchor.core.errors import DataError
from peanchor.core.fileio import atomic_path, write_json

FORMAT = "peanchor-prepared"
VERSION = 1
SPLITS = ("train", "val")


class _EveryItem(Dataset):
    """``(image, label, readable)`` for each item of ``dataset``, in order. An unreadable file is
    ``(zeros, -1, False)`` here, where training would substitute the next readable image: a preparation stores
    each image once and leaves the unreadable ones out."""

    def __init__(self, dataset: Dataset, img_size: int) -> None:
        self.dataset, self.img_size = dataset, img_size

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def _leaf(self, index: int) -> tuple[Any, int]:
        dataset = self.dataset
        while isinstance(dataset, Subset):  # a data.train_size / val_size subset
            dataset, index = dataset.dataset, int(dataset.indices[index])
        return dataset, index

    def name(self, index: int) -> str:
        dataset, i = self._leaf(index)
        return dataset.item_name(i) if hasattr(dataset, "item_name") else f"item {i}"

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int, bool]:
        dataset, i = self._leaf(index)
        item = dataset.read_item(i) if hasattr(dataset, "read_item") else dataset[i]  # arrays always decode
        if item is None:
            return torch.zeros((3, self.img_size, self.img_size), dtype=torch.uint8), -1, False
        return item[0], int(item[1]), True


def _write_split(
    dataset: Dataset, out: Path, split: str, img_size: int, *, batch_size: int, num_workers: int
) -> tuple[int, list[str]]:
    """Write ``{split}.npy`` and ``{split}_labels.npy``; returns the number of images stored and the names of the
    unreadable ones left out."""
    every = _EveryItem(dataset, img_size)
    n = len(every)
    labels = np.empty(n, dtype=np.int64)
    skipped: list[str] = []
    loader = DataLoader(every, batch_size=batch_size, shuffle=False, num_workers=num_workers)
    with atomic_path(out / f"{split}.npy") as tmp:
        images = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=(n, 3, img_size, img_size))
        pos = seen = 0
        with tqdm(total=n, desc=f"prepare {split}", unit="img", disable=None) as bar:
            for batch, target, readable in loader:  # (B, 3, S, S) uint8, (B,), (B,) bool
                skipped += [every.name(seen + int(i)) for i in torch.nonzero(~readable).flatten()]
                kept = int(readable.sum())
                images[pos : pos + kept] = batch[readable].numpy()
                labels[pos : pos + kept] = target[readable].numpy()
                pos, seen = pos + kept, seen + len(batch)
                bar.update(len(batch))
        if pos == 0:
            raise DataError(f"none of the {n} images of the {split} split could be decoded (e.g. {skipped[0]})")
        if pos < n:  # store exactly the readable images: copy them into an array of that length
            with atomic_path(tmp) as shorter:
                kept_images = np.lib.format.open_memmap(shorter, mode="w+", dtype=np.uint8,
                                                        shape=(pos, 3, img_size, img_size))  # fmt: skip
                for start in range(0, pos, batch_size):
                    end = min(start + batch_size, pos)
                    kept_images[start:end] = images[start:end]
                kept_images.flush()
                del kept_images
        images.flush()
        del images
    with atomic_path(out / f"{split}_labels.npy") as tmp:
        np.save(tmp, labels[:pos])
    return pos, skipped


def prepare_dataset(
    spec: DataSpec,
    out_dir: str | os.PathLike[str],
    img_size: int | None = None,
    *,
    batch_size: int = 256,
    num_workers: int = 0,
) -> Path:
    """Decode ``spec``'s train and val splits once, at ``img_size`` (default ``spec.img_size``).

    Returns ``out_dir``. If ``out_dir`` already holds this exact preparation it is reused; if it
    holds a different one, that is a :class:`DataError` (nothing is overwritten).
    """
    from peanchor.data import build_datasets  # the registry imports this module

    if spec.name == "prepared":
        raise DataError(f"{spec.root} is already a prepared dataset")
    size = img_size or spec.img_size
    source = dataclasses.replace(spec, img_size=size, augment="none")
    source.validate()
    out = Path(out_dir).expanduser()
    meta_path = out / "meta.json"
    if meta_path.exists():
        existing = read_meta(out)
        if existing.get("source") == source.to_dict() and existing.get("img_size") == size:
            return out
        raise DataError(
            f"{out} already holds a prepared dataset of {existing.get('source', {}).get('name')!r} at "
            f"{existing.get('img_size')} px with other settings; choose another output folder"
        )
    train, val, info = build_datasets(source)
    counts, skipped = {}, {}
    for split, dataset in zip(SPLITS, (train, val)):
        counts[split], skipped[split] = _write_split(
            dataset, out, split, size, batch_size=batch_size, num_workers=num_workers
        )
    write_json(
        meta_path,
        {
            "format": FORMAT,
            "version": VERSION,
            "img_size": size,
            "classes": info.classes,
            "mean": list(info.mean),
            "std": list(info.std),
            "counts": counts,  # images stored per split
            "skipped": skipped,  # the unreadable files (or HF rows) left out, per split
            "resize": f"Resize(({size}, {size}), antialias=True) for both splits",
            "source": source.to_dict(),
        },
    )
    return out


def read_meta(root: str | os.PathLike[str]) -> dict[str, Any]:
    meta_path = Path(root).expanduser() / "meta.json"
    if not meta_path.is_file():
        raise DataError(f"{meta_path} is missing: expected a folder made by `peanchor data prepare`")
    try:
        meta = json.loads(meta_path.read_text())
    except (OSError, ValueError) as e:
        raise DataError(f"{meta_path} is not readable JSON: {e}") from e
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise DataError(f"{meta_path} is not a peanchor prepared-dataset description (format {FORMAT!r})")
    if meta.get("version") != VERSION:
        raise DataError(f"{meta_path} has format version {meta.get('version')}; this peanchor reads version {VERSION}")
    return meta


def load_prepared_split(root: Path, split: str, img_size: int, policy: str, classes: list[str]) -> ArrayDataset:
    images_path, labels_path = root / f"{split}.npy", root / f"{split}_labels.npy"
    try:
        images = np.load(images_path, mmap_mode="r")
        labels = np.load(labels_path)
    except (OSError, ValueError) as e:
        raise DataError(f"cannot read the prepared {split} split in {root}: {e}") from e
    if images.dtype != np.uint8 or images.shape[1:] != (3, img_size, img_size) or labels.shape != (len(images),):
        raise DataError(
            f"{images_path} holds {images.dtype} {images.shape} with {labels.shape[0]} labels; "
            f"expected uint8 (N, 3, {img_size}, {img_size}) and N labels"
        )
    return ArrayDataset(images, labels, img_size=img_size, policy=policy, classes=classes, path=images_path)


def build_prepared(spec: DataSpec, train: bool) -> tuple[ArrayDataset | None, ArrayDataset, DataInfo]:
    if not spec.root:
        raise DataError("dataset 'prepared' needs data.root: a folder made by `peanchor data prepare`")
    root = Path(spec.root).expanduser()
    meta = read_meta(root)
    size = int(meta["img_size"])
    if size != spec.img_size:
        raise DataError(
            f"{root} was prepared at {size} px but data.img_size is {spec.img_size}; "
            f"set data.img_size={size} or prepare it again at {spec.img_size}"
        )
    source = meta["source"]["name"]
    classes = [str(c) for c in meta["classes"]]
    policy = resolve_augment(source, spec.augment, size)
    val = load_prepared_split(root, "val", size, "none", classes)
    train_ds = load_prepared_split(root, "train", size, policy, classes) if train else None
    info = DataInfo(len(classes), size, tuple(meta["mean"]), tuple(meta["std"]), classes, source)
    return train_ds, val, info


def decode_throughput(
    spec: DataSpec, *, n: int = 1024, batch_size: int = 128, num_workers: int = 0, split: str = "train"
) -> dict[str, float]:
    """Images per second delivered by a DataLoader over ``spec`` (decode + resize + augmentation)."""
    from peanchor.data import build_datasets

    train, val, _ = build_datasets(spec)
    dataset = train if split == "train" else val
    loader = DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers,
        generator=torch.Generator().manual_seed(0),
    )
    count, start = 0, time.perf_counter()
    for batch, _ in loader:
        count += len(batch)
        if count >= n:
            break
    seconds = time.perf_counter() - start
    return {
        "images": float(count),
        "seconds": seconds,
        "images_per_s": count / seconds if seconds > 0 else float("inf"),
    }
