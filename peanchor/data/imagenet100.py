"""ImageNet-100 (the CMC paper's 100-class subset of ImageNet-1k), read from local files only.

Two ways to point at it:

(a) ``root`` is an ImageFolder holding exactly the 100 classes (``root/train/<wnid>``,
    ``root/val/<wnid>``), e.g. made by :func:`materialize_imagenet100`.
(b) ``root`` is a full ImageNet in the same layout and ``class_list`` a file with one WordNet id
    per line (``imagenet100.txt``): a view of the listed classes, without copying.

Both number the classes the same way: by **sorted WordNet id**, as torchvision's ``ImageFolder`` does, whatever
order the class list is written in. So a file has the same label in either layout, and a model trained on one
is evaluated correctly on the other (the CMC list itself is not sorted).

ImageNet's validation images must already be sorted into class folders (``val/<wnid>/*.JPEG``,
as produced by the usual ``valprep.sh``).

Imports: :mod:`peanchor.data.folder`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from peanchor.data.folder import _listing, class_dirs, imagefolder_samples, require_dir, scan_classes
from peanchor.core.errors import DataError

NUM_CLASSES = 100
LAYOUT = "ROOT/train/<wnid>/*.JPEG and ROOT/val/<wnid>/*.JPEG"
_WNID = re.compile(r"^n\d{8}$")


def read_class_list(path: str | os.PathLike[str]) -> list[str]:
    """WordNet ids, one per line (blank lines and ``#`` comments ignored; extra columns allowed)."""
    path = Path(path).expanduser()
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise DataError(
            f"class list {path} does not exist: expected a text file with one WordNet id (n01234567) per line"
        ) from None
    except OSError as e:
        raise DataError(f"cannot read class list {path}: {e.strerror or e}") from e
    wnids: list[str] = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("#", 1)[0].split()
        if not fields:
            continue
        if not _WNID.match(fields[0]):
            raise DataError(f"{path}:{number}: {fields[0]!r} is not a WordNet id (expected n followed by 8 digits)")
        wnids.append(fields[0])
    if not wnids:
        raise DataError(f"class list {path} holds no WordNet ids")
    seen: set[str] = set()
    dupes = [w for w in wnids if w in seen or seen.add(w)]
    if dupes:
        raise DataError(f"class list {path} repeats {_listing(dupes)}")
    return wnids


def check_classes(root: Path, wnids: list[str], class_list: str | os.PathLike[str]) -> None:
    """Every listed wnid must have a folder in ``root/train`` and ``root/val``."""
    for split in ("train", "val"):
        split_dir = root / split
        require_dir(split_dir, LAYOUT.replace("ROOT", str(root)))
        missing = [w for w in wnids if not (split_dir / w).is_dir()]
        if missing:
            raise DataError(
                f"{len(missing)} of the {len(wnids)} classes in {class_list} are missing from {split_dir}: "
                f"{_listing(missing)}"
            )


def imagenet100_samples(root: Path, class_list: str | None, *, train: bool = True):
    """``(classes, train samples or None, val samples)`` for either layout (see the module doc)."""
    if class_list is None:
        require_dir(root / "train", LAYOUT.replace("ROOT", str(root)))
        found = class_dirs(root / "train")
        if len(found) != NUM_CLASSES:
            raise DataError(
                f"{root / 'train'} has {len(found)} class folders, imagenet100 expects {NUM_CLASSES}: "
                "for a full ImageNet root also set data.class_list (one WordNet id per line)"
            )
        return imagefolder_samples(root, train=train)
    listed = read_class_list(class_list)
    check_classes(root, listed, class_list)
    wnids = sorted(listed)  # the labels of layout (a), see the module docstring
    train_samples = scan_classes(root / "train", wnids) if train else None
    return wnids, train_samples, scan_classes(root / "val", wnids)


def materialize_imagenet100(
    imagenet_root: str | os.PathLike[str], class_list: str | os.PathLike[str], out: str | os.PathLike[str]
) -> Path:
    """Make ``out/{train,val}/<wnid>`` symlinks to the listed classes of a full ImageNet.

    Idempotent: a link that already points at the right folder is kept. Anything else already at a
    link's place is an error (nothing is overwritten). Returns ``out``.
    """
    root = Path(imagenet_root).expanduser()
    require_dir(root, LAYOUT.replace("ROOT", str(root)))
    wnids = read_class_list(class_list)
    check_classes(root, wnids, class_list)
    out = Path(out).expanduser()
    plan = []
    for split in ("train", "val"):
        for wnid in wnids:
            target, link = (root / split / wnid).resolve(), out / split / wnid
            if link.is_symlink() or link.exists():
                if not (link.is_symlink() and Path(os.readlink(link)) == target):
                    raise DataError(f"{link} already exists and is not a link to {target}; refusing to overwrite it")
                continue
            plan.append((target, link))
    for target, link in plan:  # everything was checked before the first link is made
        link.parent.mkdir(parents=True, exist_ok=True)
        tmp = link.with_name(f".{link.name}.{os.getpid()}.tmp")
        try:
            os.symlink(target, tmp, target_is_directory=True)
            os.replace(tmp, link)  # atomic: the link appears whole or not at all
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            raise DataError(f"cannot create the link {link}: {e.strerror or e}") from e
    return out
