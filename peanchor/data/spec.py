"""What to load (:class:`DataSpec`, stored in a run's config.yaml) and what was loaded (:class:`DataInfo`).

Imports: :mod:`peanchor.core.errors` only.
"""

from __future__ import annotations

import dataclasses
import os  # noqa: F401  (the doctests use it)
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peanchor.core.errors import ConfigError

# Augmentation policies a DataSpec may name. "auto" picks the dataset's default (see transforms.py).
AUGMENT_POLICIES: tuple[str, ...] = ("auto", "none", "flip", "translate", "crop_flip", "rrc_flip")


@dataclass
class DataSpec:
    """A dataset and how to read it. Plain JSON-able fields only: it is saved with every run.

    ``train_size``/``val_size``: for ``scenes`` the number of images generated per split (defaults
    20000 / 2000); for every other dataset an optional seeded random subset of that many images.
    """

    __pydantic_config__ = {"extra": "forbid"}  # unknown keys are errors in a training config (training.config)

    name: str = "scenes"
    root: str | None = None
    class_list: str | None = None
    img_size: int = 32
    train_size: int | None = None
    val_size: int | None = None
    seed: int = 0
    augment: str = "auto"
    cache_dir: str | None = None  # scenes cache; default $PEANCHOR_CACHE or ~/.cache/peanchor
    hf_name: str | None = None  # hf: a dataset name in the local HF cache (when root is not a save_to_disk dir)
    hf_train_split: str = "train"
    hf_val_split: str = "validation"
    image_column: str = "image"
    label_column: str = "label"

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> DataSpec:
        """Build from a config mapping; an unknown key is a :class:`ConfigError` naming the valid ones."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown data key(s) {', '.join(unknown)}; valid keys: {', '.join(sorted(known))}")
        spec = cls(**values)
        spec.validate()
        return spec

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def for_dataset(self, name: str) -> DataSpec:
        """This spec switched to dataset ``name``: what describes the model's input and the recipe (``img_size``,
        ``augment``, ``seed``, ``cache_dir``) is kept, everything about the old dataset (its root, class list,
        split sizes, HF columns) goes back to the defaults. A named dataset is then used whole; only an explicit
        ``train_size``/``val_size`` afterwards subsamples it.

        >>> spec = DataSpec(name="scenes", img_size=16, train_size=512, augment="flip").for_dataset("imagefolder")
        >>> spec.name, spec.img_size, spec.augment, spec.train_size, spec.val_size
        ('imagefolder', 16, 'flip', None, None)
        """
        if name == self.name:
            return dataclasses.replace(self)
        return DataSpec(name=name, img_size=self.img_size, augment=self.augment, seed=self.seed, cache_dir=self.cache_dir)

    def validate(self) -> None:
        if not isinstance(self.img_size, int) or isinstance(self.img_size, bool) or self.img_size < 8:
            raise ConfigError(f"data.img_size={self.img_size!r}: expected an integer >= 8")
        for key in ("train_size", "val_size"):
            value = getattr(self, key)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ConfigError(f"data.{key}={value!r}: expected a positive integer or null")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ConfigError(f"data.seed={self.seed!r}: expected a non-negative integer")
        if self.augment not in AUGMENT_POLICIES:
            raise ConfigError(f"data.augment={self.augment!r}: expected one of {', '.join(AUGMENT_POLICIES)}")


#: The fields of a :class:`DataSpec` that are paths on disk: compared as the files they name, not as strings.
PATH_FIELDS: tuple[str, ...] = ("root", "class_list", "cache_dir")


def resolved_path(value: Any) -> Any:
    """A path as the file it names (``~`` expanded, made absolute, links resolved); anything else as it is.

    >>> resolved_path("data/../data") == resolved_path(os.path.abspath("data"))
    True
    """
    return str(Path(value).expanduser().resolve()) if isinstance(value, str) and value else value


def with_resolved_paths(data: dict[str, Any]) -> dict[str, Any]:
    """A data spec's mapping with its :data:`PATH_FIELDS` resolved (:func:`resolved_path`), for comparing two specs:
    a relative path and the absolute path of the same folder are the same dataset."""
    return {k: resolved_path(v) if k in PATH_FIELDS else v for k, v in data.items()}


@dataclass(frozen=True)
class DataInfo:
    """What a built dataset is: the model needs ``num_classes``/``img_size``, normalisation needs ``mean``/``std``."""

    num_classes: int
    img_size: int
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    classes: list[str] = field(default_factory=list)
    name: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["mean"], d["std"] = list(self.mean), list(self.std)
        return d
