"""Builders of the small values many tests share: a :class:`DataInfo` for tiny images and the analysis plan of the
16 px tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from peanchor.analysis.plan import AnalysisPlan, resolve_plan
from peanchor.data import DataInfo
from peanchor.data.transforms import IMAGENET_MEAN, IMAGENET_STD


def tiny_info(classes: Sequence[str] = ("a", "b", "c"), name: str = "random", img_size: int = 16) -> DataInfo:
    """What a dataset of ``img_size`` px images with these ``classes`` is, normalised with ImageNet's statistics."""
    return DataInfo(len(classes), img_size, IMAGENET_MEAN, IMAGENET_STD, list(classes), name)


def plan(**settings: Any) -> AnalysisPlan:
    """The analysis plan for 16 px images: the resolution rule's shifts, ``settings`` over the defaults."""
    return resolve_plan(16, given=settings)
