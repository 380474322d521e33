"""Which shifts fit a resolution: :func:`table_name` (the ImageNet-C-style table for an image side),
:func:`severity_table` (severity 1..5 of every kind from it) and :func:`paper_shifts` (the paper's JPEG and blur at
>= 160 px, severity 3 of the fitting table below).

Severity tables are the ones in Hendrycks & Dietterich's generation scripts (``hendrycks/robustness``:
``make_imagenet_c.py`` for 224 px, ``make_tinyimagenet_c.py`` for 64 px, ``make_cifar_c.py`` for 32 px); each kind
holds its own (:mod:`peanchor.analysis.shifts.kinds`).

Imports: :mod:`peanchor.analysis.shifts` (registry, shift), :mod:`peanchor.settings.conditions` (the paper's shifts).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal

from peanchor.analysis.shifts.registry import KINDS, get_kind
from peanchor.analysis.shifts.shift import Shift
from peanchor.settings.conditions import PAPER
from peanchor.core.errors import ConfigError

__all__ = ["PAPER_SHIFTS", "TABLE_RESOLUTION", "paper_shifts", "paper_shifts_source", "severity_shift",
           "severity_table", "table_name"]  # fmt: skip

TableName = Literal["imagenet-c", "cifar-10-c", "tiny-imagenet-c"]
# The image side each table was designed for.
TABLE_RESOLUTION: dict[str, int] = {"imagenet-c": 224, "cifar-10-c": 32, "tiny-imagenet-c": 64}
# The paper's own shifts (docs/study.md, "Models in the paper"), used as is at >= 160 px.
PAPER_SHIFTS: dict[str, dict[str, Any]] = PAPER.shifts


def _check_img_size(img_size: int) -> None:
    if isinstance(img_size, bool) or not isinstance(img_size, int) or img_size < 1:
        raise ConfigError(f"img_size must be a positive integer, got {img_size!r}")


def table_name(img_size: int) -> TableName:
    """The severity table that fits ``img_size``: >= 160 px ImageNet-C, <= 48 px CIFAR-10-C, else Tiny-ImageNet-C.

    >>> table_name(224), table_name(32), table_name(64)
    ('imagenet-c', 'cifar-10-c', 'tiny-imagenet-c')
    """
    _check_img_size(img_size)
    if img_size >= 160:
        return "imagenet-c"
    if img_size <= 48:
        return "cifar-10-c"
    return "tiny-imagenet-c"


def severity_shift(kind: str, severity: int, img_size: int, **params: Any) -> Shift:
    """Severity ``severity`` (1..5) of ``kind`` from the table for ``img_size``, resolved for it; ``params`` adds
    parameters the table does not set (a noise seed).

    >>> severity_shift("jpeg", 4, 224).quality, severity_shift("defocus_blur", 1, 32).describe()
    (10, {'kind': 'defocus_blur', 'radius': 0.3, 'alias_blur': 0.4})
    """
    values = {**params, **get_kind(kind).table_values(table_name(img_size), severity)}
    return Shift(kind, **values).resolved(img_size)


def paper_shifts_source(img_size: int) -> str:
    """Where :func:`paper_shifts` takes its values from: ``"paper"`` or ``"<table> severity 3"``."""
    name = table_name(img_size)
    return "paper" if name == "imagenet-c" else f"{name} severity 3"


def paper_shifts(img_size: int) -> dict[str, Shift]:
    """The ``"jpeg"`` and ``"blur"`` shifts for ``img_size`` px models.

    At >= 160 px these are the paper's (JPEG quality 5; blur kernel 5, σ 2.5). Smaller images would be
    pushed to chance by them, so <= 48 px uses CIFAR-10-C severity 3 (JPEG 58, σ 0.7) and anything
    between uses Tiny-ImageNet-C severity 3 (JPEG 50, σ 1.0); see docs/study.md, "Shifts". Blur
    kernels there follow :func:`~peanchor.analysis.shifts.kinds.blur.default_blur_kernel_size`.

    >>> {k: s.describe() for k, s in paper_shifts(224).items()}
    {'jpeg': {'kind': 'jpeg', 'quality': 5}, 'blur': {'kind': 'blur', 'kernel_size': 5, 'sigma': 2.5}}
    >>> paper_shifts(32)["blur"].describe()
    {'kind': 'blur', 'kernel_size': 7, 'sigma': 0.7}
    """
    if table_name(img_size) == "imagenet-c":
        return {key: Shift.from_dict(spec) for key, spec in PAPER_SHIFTS.items()}
    return {kind: severity_shift(kind, 3, img_size) for kind in ("jpeg", "blur")}


def severity_table(img_size: int, kinds: Iterable[str] | None = None) -> dict[str, list[Shift]]:
    """Severity 1..5 shifts per kind from the table for ``img_size`` (see :func:`table_name`).

    ``kinds`` picks a subset (default: every registered kind with a table). Size-dependent defaults (a blur's
    kernel) are resolved for ``img_size``; noise uses seed 0.

    >>> [s.quality for s in severity_table(32, ["jpeg"])["jpeg"]]
    [80, 65, 58, 50, 40]
    """
    name = table_name(img_size)
    wanted = [k for k, kind in KINDS.items() if name in kind.tables] if kinds is None else list(kinds)
    for kind in wanted:
        if kind not in KINDS or name not in KINDS[kind].tables:
            raise ConfigError(f"no severity table for shift kind {kind!r}; expected one of {', '.join(KINDS)}")
    return {kind: [severity_shift(kind, level, img_size) for level in range(1, 6)] for kind in wanted}
