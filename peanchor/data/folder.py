"""Image-file datasets: ``root/{train,val}/<class>/<image>`` (``imagefolder``) and the decoder they share.

Files are decoded with Pillow (see :func:`decode_image_file`). A file that cannot be decoded never
stops training: the dataset warns once naming the file and returns the next readable image instead.

Imports: torch, torchvision; :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from torch.utils.data import Dataset
from torchvision.transforms.v2 import functional as TF

from peanchor.core.errors import DataError

IMG_EXTENSIONS: tuple[str, ...] = (
    ".jpg",
    ".jpeg",
    ".png",
    ".gif",
    ".webp",
    ".bmp",
    ".tif",
    ".tiff",
    ".ppm",
    ".pgm",
    ".pbm",
)
FOLDER_LAYOUT = "ROOT/train/<class>/<image> and ROOT/val/<class>/<image>"


class UnreadableImage(Exception):
    """An image file that neither torchvision nor Pillow can decode."""


def decode_image_file(path: str | os.PathLike[str]) -> torch.Tensor:
    """Decode an image file to uint8 RGB ``(3, H, W)``; raises :class:`UnreadableImage`.

    Pillow (libjpeg-turbo, every common format) rather than ``torchvision.io.decode_image``, whose
    decoders are deprecated from torchvision 0.29 on. Grayscale, palette, CMYK and alpha images are
    converted to RGB; EXIF orientation is not applied (as torchvision's ImageFolder loader).
    """
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB")  # decodes fully: a truncated file fails here, not later
    except (OSError, UnidentifiedImageError, ValueError, SyntaxError, Image.DecompressionBombError) as e:
        raise UnreadableImage(str(e)) from e
    return TF.pil_to_tensor(rgb)  # (3, H, W) uint8


def is_image_file(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith(IMG_EXTENSIONS)


def list_images(directory: Path) -> list[Path]:
    """Image files directly in ``directory`` (sorted, hidden files skipped)."""
    with os.scandir(directory) as it:
        return sorted(Path(e.path) for e in it if e.is_file() and is_image_file(e.name))


def class_dirs(split_dir: Path) -> list[str]:
    with os.scandir(split_dir) as it:
        return sorted(e.name for e in it if e.is_dir() and not e.name.startswith("."))


def scan_classes(split_dir: Path, classes: Sequence[str]) -> list[tuple[Path, int]]:
    """``(file, label)`` for every image of ``split_dir/<class>``, labels ordered as ``classes``.

    A missing or image-less class folder is a :class:`DataError` naming it.
    """
    samples: list[tuple[Path, int]] = []
    for label, name in enumerate(classes):
        directory = split_dir / name
        if not directory.is_dir():
            raise DataError(f"{directory} is missing: expected one folder per class in {split_dir}")
        files = list_images(directory)
        if not files:
            raise DataError(
                f"{directory} holds no images: expected at least one "
                f"{'/'.join(IMG_EXTENSIONS[:4])}... file per class folder"
            )
        samples.extend((f, label) for f in files)
    return samples


def require_dir(path: Path, what: str) -> None:
    if not path.is_dir():
        raise DataError(f"{path} does not exist or is not a folder: expected {what}")


class FolderDataset(Dataset):
    """``(uint8 (3, S, S), label)`` from a list of image files, through a v2 ``transform``."""

    def __init__(
        self,
        samples: Sequence[tuple[Path, int]],
        classes: Sequence[str],
        transform: Callable[[torch.Tensor], torch.Tensor],
    ) -> None:
        if not samples:
            raise DataError("no images to load")
        self.samples = [(str(p), int(y)) for p, y in samples]
        self.targets = [y for _, y in self.samples]
        self.classes = list(classes)
        self.transform = transform
        self._bad: set[int] = set()  # per process: DataLoader workers each keep their own

    def __len__(self) -> int:
        return len(self.samples)

    def item_name(self, index: int) -> str:
        """The file behind item ``index`` (for messages about it)."""
        return self.samples[index][0]

    def read_item(self, index: int) -> tuple[torch.Tensor, int] | None:
        """Item ``index``, or None (with a warning naming the file, once) when it cannot be decoded."""
        if index in self._bad:
            return None
        path, label = self.samples[index]
        try:
            image = decode_image_file(path)
        except UnreadableImage as e:
            self._bad.add(index)
            warnings.warn(f"skipping unreadable image {path} ({e})", stacklevel=3)
            return None
        return self.transform(image), label

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        # Training never stops on a bad file: it gets the next readable image instead.
        n = len(self.samples)
        for step in range(n):
            item = self.read_item((index + step) % n)
            if item is not None:
                return item
        raise DataError(f"none of the {n} images (e.g. {self.samples[0][0]}) could be decoded")


def folder_root(root: str | None, dataset: str, layout: str = FOLDER_LAYOUT) -> Path:
    """``root`` as an existing folder, else a :class:`DataError` that shows the expected ``layout``."""
    if not root:
        raise DataError(f"dataset {dataset!r} needs data.root: a folder laid out as {layout}")
    path = Path(root).expanduser()
    require_dir(path, layout.replace("ROOT", str(path)))
    return path


def _listing(names: Sequence[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" ... ({len(names)} in all)" if len(names) > limit else "")


def imagefolder_samples(
    root: Path, *, train: bool = True
) -> tuple[list[str], list[tuple[Path, int]] | None, list[tuple[Path, int]]]:
    """``(classes, train samples or None, val samples)`` of an ImageFolder root.

    Classes are the sorted folders of ``root/train``; ``root/val`` must hold the same ones. For evaluation alone
    (``train=False``) ``root/val`` is enough: without ``root/train`` its own folders are the classes.
    """
    layout = FOLDER_LAYOUT.replace("ROOT", str(root))
    train_dir, val_dir = root / "train", root / "val"
    if train or train_dir.exists():
        require_dir(train_dir, layout)
    require_dir(val_dir, layout)
    if not train_dir.exists():  # an evaluation folder: val/ alone
        classes = class_dirs(val_dir)
        if not classes:
            raise DataError(f"{val_dir} has no class folders: expected {val_dir}/<class>/<image>")
        return classes, None, scan_classes(val_dir, classes)
    classes = class_dirs(train_dir)
    if not classes:
        raise DataError(f"{train_dir} has no class folders: expected {train_dir}/<class>/<image>")
    val_classes = class_dirs(val_dir)
    if val_classes != classes:
        missing = sorted(set(classes) - set(val_classes))
        extra = sorted(set(val_classes) - set(classes))
        detail = "; ".join(
            ([f"missing from val: {_listing(missing)}"] if missing else [])
            + ([f"not in train: {_listing(extra)}"] if extra else [])
        )
        raise DataError(f"{val_dir} must hold the same class folders as {train_dir} ({detail})")
    train_samples = scan_classes(train_dir, classes) if train else None
    return classes, train_samples, scan_classes(val_dir, classes)
