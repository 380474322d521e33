"""Content-disrupting distribution shifts on uint8 image batches, with the paper's presets.

A :class:`Shift` is a frozen, JSON-describable corruption that maps a uint8 batch ``(B, C, S, S)`` to
a uint8 batch of the same shape. It acts *after* the evaluation resize (as in the paper) and before
normalisation. Every kind is deterministic: the same input (and, for noise, the same image index)
always gives the same output.

Kinds and where they come from:

- ``jpeg``: encode + decode at ``quality`` with ``torchvision.io.encode_jpeg`` / ``decode_jpeg``
  (the codec behind the paper's ``torchvision.transforms.v2.JPEG``). Always run on the CPU
  (libjpeg), so results do not depend on the device or on nvjpeg.
- ``blur``: ``torchvision.transforms.v2.functional.gaussian_blur`` (the kernel behind the paper's
  ``v2.GaussianBlur``) with a square kernel of odd size ``kernel_size`` and standard deviation
  ``sigma``. When ``kernel_size`` is not given, :func:`default_blur_kernel_size` picks
  ``2 * int(4 * sigma + 0.5) + 1`` (the radius rule of ``skimage.filters.gaussian`` with its default
  ``truncate=4``, which is how ImageNet-C generated its Gaussian blur), capped to the largest odd
  size not above the image side. torchvision pads with ``reflect``; skimage used ``nearest``, so the
  outermost pixels differ slightly from ImageNet-C's files.
- ``gaussian_noise``: ImageNet-C's ``gaussian_noise``: on the [0, 1] scale, ``clip(x + N(0, σ²))``.
  The noise comes from a ``torch.Generator`` seeded per image from ``(seed, image index)``, so
  the result does not depend on how a set is chunked. Plain torch arithmetic (torchvision's
  ``gaussian_noise`` takes no generator).
- ``contrast``: ImageNet-C's ``contrast``: ``clip((x - m) * c + m)`` with ``m`` the mean of each
  channel of each image over its pixels. ``v2.functional.adjust_contrast`` is *not* used: it blends
  towards the mean of the greyscale image, which is a different corruption. Plain torch arithmetic.
- ``pixelate``: ImageNet-C's ``pixelate``: shrink to ``int(S * factor)`` pixels and enlarge back. ImageNet-C
  uses PIL's BOX filter both ways; torchvision's tensor resize has no box filter, so the shrink
  is an antialiased bilinear ``v2.functional.resize`` (slightly smoother than a box average) and
  the enlargement is ``NEAREST_EXACT`` (what a box filter does when upsampling). ImageNet-C-style,
  not bit-exact.

Severity tables (1–5) are the ones in Hendrycks & Dietterich's generation scripts
(``hendrycks/robustness``: ``make_imagenet_c.py`` for 224 px, ``make_tinyimagenet_c.py`` for 64 px,
``make_cifar_c.py`` for 32 px). The JPEG and blur rows are the ones docs/study.md lists. Two
departures apply to every kind: float results are *rounded* to uint8 (ImageNet-C truncates with
``np.uint8``, at most one grey level of difference), and nothing is re-encoded afterwards
(ImageNet-C and Tiny-ImageNet-C stored their images as JPEG, quality 85).

Corrupting whole evaluation sets once (and caching them) is :mod:`peanchor.analysis.corrupted_sets`.

Imports: torch, torchvision; :mod:`peanchor.conditions` (the paper's shifts).
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import torch
from torchvision.io import decode_jpeg, encode_jpeg
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from peanchor.analysis.corrupted_sets import check_batch as _check_batch
from peanchor.conditions import PAPER
from peanchor.errors import ConfigError

__all__ = [
    "PAPER_SHIFTS",
    "SEVERITY_TABLES",
    "SHIFT_KINDS",
    "SHIFT_PARAMS",
    "TABLE_RESOLUTION",
    "Shift",
    "ShiftKind",
    "default_blur_kernel_size",
    "paper_shifts",
    "paper_shifts_source",
    "severity_table",
    "table_name",
]

ShiftKind = Literal["jpeg", "blur", "gaussian_noise", "contrast", "pixelate"]
SHIFT_KINDS: tuple[str, ...] = get_args(ShiftKind)

# Which parameters each kind takes, in the order they appear in names and descriptions.
SHIFT_PARAMS: dict[str, tuple[str, ...]] = {
    "jpeg": ("quality",),
    "blur": ("kernel_size", "sigma"),
    "gaussian_noise": ("sigma", "seed"),
    "contrast": ("factor",),
    "pixelate": ("factor",),
}
_ALL_PARAMS = ("quality", "kernel_size", "sigma", "factor", "seed")

TableName = Literal["imagenet-c", "cifar-10-c", "tiny-imagenet-c"]

# Severity 1..5 parameters, per table and kind (see the module docstring for the sources).
# jpeg: quality; blur and gaussian_noise: sigma (noise on the [0, 1] scale); contrast and pixelate: factor.
SEVERITY_TABLES: dict[str, dict[str, tuple[float, ...]]] = {
    "imagenet-c": {
        "jpeg": (25, 18, 15, 10, 7),
        "blur": (1, 2, 3, 4, 6),
        "gaussian_noise": (0.08, 0.12, 0.18, 0.26, 0.38),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        "pixelate": (0.6, 0.5, 0.4, 0.3, 0.25),
    },
    "cifar-10-c": {
        "jpeg": (80, 65, 58, 50, 40),
        "blur": (0.4, 0.6, 0.7, 0.8, 1.0),
        "gaussian_noise": (0.04, 0.06, 0.08, 0.09, 0.10),
        "contrast": (0.75, 0.5, 0.4, 0.3, 0.15),
        "pixelate": (0.95, 0.9, 0.85, 0.75, 0.65),
    },
    "tiny-imagenet-c": {
        "jpeg": (65, 58, 50, 40, 25),
        "blur": (0.5, 0.75, 1, 1.25, 1.5),
        "gaussian_noise": (0.04, 0.08, 0.12, 0.15, 0.18),
        "contrast": (0.4, 0.3, 0.2, 0.1, 0.05),
        "pixelate": (0.9, 0.8, 0.7, 0.6, 0.5),
    },
}
# The image side each table was designed for.
TABLE_RESOLUTION: dict[str, int] = {"imagenet-c": 224, "cifar-10-c": 32, "tiny-imagenet-c": 64}

# The paper's own shifts (docs/study.md, "Models in the paper"), used as is at >= 160 px.
PAPER_SHIFTS: dict[str, dict[str, Any]] = PAPER.shifts


def default_blur_kernel_size(sigma: float, img_size: int | None = None) -> int:
    """Odd kernel size for a Gaussian blur of standard deviation ``sigma``.

    ``2 * int(4 * sigma + 0.5) + 1``: the radius skimage's ``gaussian`` uses (``truncate=4``),
    with which ImageNet-C generated its blur. With ``img_size`` given it is capped to the largest
    odd size not above the image side (reflect padding needs the half-kernel to fit in the image).

    >>> default_blur_kernel_size(1.0), default_blur_kernel_size(0.7), default_blur_kernel_size(6, 32)
    (9, 7, 31)
    """
    if not sigma > 0:
        raise ConfigError(f"blur sigma must be > 0, got {sigma!r}")
    size = 2 * int(4 * sigma + 0.5) + 1
    if img_size is not None:
        cap = img_size if img_size % 2 else img_size - 1
        size = min(size, max(cap, 1))
    return size


def _image_seed(seed: int, index: int) -> int:
    # A stable 63-bit seed per (seed, image index); distinct seeds never share a stream of indices.
    digest = hashlib.blake2b(f"peanchor-noise:{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    # x on the 0..255 scale (float); round to the nearest grey level.
    return x.clamp_(0.0, 255.0).round_().to(torch.uint8)


@dataclass(frozen=True)
class Shift:
    """A deterministic corruption of uint8 image batches.

    Build one with the kind and its parameters, e.g. ``Shift("jpeg", quality=58)``,
    ``Shift("blur", sigma=0.7)``, ``Shift("gaussian_noise", sigma=0.08, seed=0)``,
    ``Shift("contrast", factor=0.4)``, ``Shift("pixelate", factor=0.6)``. Parameters that do not
    belong to the kind are refused. A blur without ``kernel_size`` picks
    :func:`default_blur_kernel_size` for the image it is applied to; :meth:`resolved` fixes it in
    advance so that :meth:`describe` records the kernel actually used.

    >>> s = Shift("jpeg", quality=58)
    >>> s.name, s.describe()
    ('jpeg_q58', {'kind': 'jpeg', 'quality': 58})
    >>> Shift.from_dict(s.describe()) == s
    True
    >>> x = torch.zeros(2, 3, 32, 32, dtype=torch.uint8)
    >>> Shift("blur", kernel_size=5, sigma=2.5)(x).shape
    torch.Size([2, 3, 32, 32])
    """

    kind: ShiftKind
    quality: int | None = None
    kernel_size: int | None = None
    sigma: float | None = None
    factor: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in SHIFT_PARAMS:
            raise ConfigError(f"unknown shift kind {self.kind!r}; expected one of {', '.join(SHIFT_KINDS)}")
        allowed = SHIFT_PARAMS[self.kind]
        for p in _ALL_PARAMS:
            if p not in allowed and getattr(self, p) is not None:
                raise ConfigError(f"shift {self.kind!r} takes {', '.join(allowed)}; got {p}={getattr(self, p)!r}")
        if self.kind == "jpeg":
            q = self.quality
            if isinstance(q, bool) or not isinstance(q, int) or not 1 <= q <= 100:
                raise ConfigError(f"jpeg quality must be an integer in 1..100, got {q!r}")
        if self.kind in ("blur", "gaussian_noise"):
            s = self.sigma
            if isinstance(s, bool) or not isinstance(s, (int, float)) or not (s > 0 and math.isfinite(s)):
                raise ConfigError(f"{self.kind} sigma must be a finite number > 0, got {s!r}")
            object.__setattr__(self, "sigma", float(s))
        if self.kind == "blur" and self.kernel_size is not None:
            k = self.kernel_size
            if isinstance(k, bool) or not isinstance(k, int) or k < 1 or k % 2 == 0:
                raise ConfigError(f"blur kernel_size must be an odd positive integer, got {k!r}")
        if self.kind == "gaussian_noise":
            if self.seed is None:
                object.__setattr__(self, "seed", 0)
            elif isinstance(self.seed, bool) or not isinstance(self.seed, int):
                raise ConfigError(f"gaussian_noise seed must be an integer, got {self.seed!r}")
        if self.kind in ("contrast", "pixelate"):
            f = self.factor
            if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f):
                raise ConfigError(f"{self.kind} factor must be a finite number, got {f!r}")
            if self.kind == "contrast" and f < 0:
                raise ConfigError(f"contrast factor must be >= 0, got {f!r}")
            if self.kind == "pixelate" and not 0 < f <= 1:
                raise ConfigError(f"pixelate factor must be in (0, 1], got {f!r}")
            object.__setattr__(self, "factor", float(f))

    # ---- description -----------------------------------------------------------------------
    @property
    def name(self) -> str:
        """A short, file-name-safe label, e.g. ``jpeg_q58``, ``blur_k5_s2.5``, ``pixelate_f0.6``."""
        if self.kind == "jpeg":
            return f"jpeg_q{self.quality}"
        if self.kind == "blur":
            k = f"_k{self.kernel_size}" if self.kernel_size is not None else ""
            return f"blur{k}_s{self.sigma:g}"
        if self.kind == "gaussian_noise":
            return f"gaussian_noise_s{self.sigma:g}" + (f"_seed{self.seed}" if self.seed else "")
        return f"{self.kind}_f{self.factor:g}"

    def describe(self) -> dict[str, Any]:
        """``{"kind": ..., <its parameters>}``: JSON-able, and :meth:`from_dict` rebuilds the shift."""
        return {"kind": self.kind, **{p: getattr(self, p) for p in SHIFT_PARAMS[self.kind]}}

    @classmethod
    def from_dict(cls, spec: dict[str, Any]) -> Shift:
        """Rebuild a shift from :meth:`describe` output (e.g. read back from results.json)."""
        if not isinstance(spec, dict) or "kind" not in spec:
            raise ConfigError(f"a shift description needs a 'kind' key, got {spec!r}")
        unknown = set(spec) - {"kind", *_ALL_PARAMS}
        if unknown:
            raise ConfigError(f"unknown shift parameter(s) {', '.join(sorted(unknown))} in {spec!r}")
        return cls(**spec)

    def resolved(self, img_size: int) -> Shift:
        """This shift with every size-dependent default fixed for ``img_size`` px images; a blur kernel too large
        for them is a :class:`ConfigError` (found here, before a long run, rather than at the first batch)."""
        if self.kind == "blur" and self.kernel_size is None:
            assert self.sigma is not None
            return dataclasses.replace(self, kernel_size=default_blur_kernel_size(self.sigma, img_size))
        if self.kind == "blur" and self.kernel_size is not None and self.kernel_size // 2 >= img_size:
            raise ConfigError(f"blur kernel_size {self.kernel_size} is too large for {img_size} px images "
                              f"(needs kernel_size // 2 < {img_size})")  # fmt: skip
        return self

    # ---- application -----------------------------------------------------------------------
    def __call__(self, images: torch.Tensor, *, start_index: int = 0) -> torch.Tensor:
        """Corrupt a uint8 batch ``(B, C, H, W)``; returns a new uint8 batch of the same shape.

        ``start_index`` is the dataset index of ``images[0]``; only ``gaussian_noise`` uses it (its
        noise is seeded per image index, so chunking a set does not change the result).
        """
        _check_batch(images)
        if images.shape[0] == 0:
            return images.clone()
        if self.kind == "jpeg":
            return self._jpeg(images)
        if self.kind == "blur":
            return self._blur(images)
        if self.kind == "gaussian_noise":
            return self._gaussian_noise(images, start_index)
        if self.kind == "contrast":
            return self._contrast(images)
        return self._pixelate(images)

    def _jpeg(self, images: torch.Tensor) -> torch.Tensor:
        # libjpeg on the CPU for every device: GPU (nvjpeg) output differs and would split caches.
        cpu = images.detach().to("cpu").contiguous()  # (B, C, H, W)
        encoded = encode_jpeg(list(cpu), quality=self.quality)
        decoded = decode_jpeg(encoded)
        out = torch.stack(decoded)  # (B, C, H, W)
        return out.to(images.device)

    def _blur(self, images: torch.Tensor) -> torch.Tensor:
        assert self.sigma is not None
        side = min(images.shape[-2:])
        k = self.kernel_size if self.kernel_size is not None else default_blur_kernel_size(self.sigma, side)
        if k // 2 >= side:
            raise ConfigError(f"blur kernel_size {k} is too large for {side} px images (needs kernel_size // 2 < {side})")
        return TF.gaussian_blur(images, kernel_size=[k, k], sigma=[self.sigma, self.sigma])

    def _gaussian_noise(self, images: torch.Tensor, start_index: int) -> torch.Tensor:
        assert self.sigma is not None and self.seed is not None
        b, c, h, w = images.shape
        noise = torch.empty((b, c, h, w), dtype=torch.float32)  # (B, C, H, W), N(0, 1) on the CPU
        gen = torch.Generator()
        for i in range(b):
            gen.manual_seed(_image_seed(self.seed, start_index + i))
            noise[i] = torch.randn((c, h, w), generator=gen)
        x = images.to(torch.float32) + noise.to(images.device) * (self.sigma * 255.0)  # 0..255 scale
        return _to_uint8(x)

    def _contrast(self, images: torch.Tensor) -> torch.Tensor:
        assert self.factor is not None
        x = images.to(torch.float32)  # (B, C, H, W)
        mean = x.mean(dim=(-2, -1), keepdim=True)  # (B, C, 1, 1): per image and channel, as ImageNet-C
        return _to_uint8((x - mean) * self.factor + mean)

    def _pixelate(self, images: torch.Tensor) -> torch.Tensor:
        assert self.factor is not None
        h, w = images.shape[-2:]
        small = [max(1, int(h * self.factor)), max(1, int(w * self.factor))]
        x = TF.resize(images, small, interpolation=InterpolationMode.BILINEAR, antialias=True)  # (B, C, h', w')
        return TF.resize(x, [h, w], interpolation=InterpolationMode.NEAREST_EXACT, antialias=False)


# ---- presets ---------------------------------------------------------------------------------
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


def paper_shifts_source(img_size: int) -> str:
    """Where :func:`paper_shifts` takes its values from: ``"paper"`` or ``"<table> severity 3"``."""
    name = table_name(img_size)
    return "paper" if name == "imagenet-c" else f"{name} severity 3"


def paper_shifts(img_size: int) -> dict[str, Shift]:
    """The ``"jpeg"`` and ``"blur"`` shifts for ``img_size`` px models.

    At >= 160 px these are the paper's (JPEG quality 5; blur kernel 5, σ 2.5). Smaller images would be
    pushed to chance by them, so <= 48 px uses CIFAR-10-C severity 3 (JPEG 58, σ 0.7) and anything
    between uses Tiny-ImageNet-C severity 3 (JPEG 50, σ 1.0); see docs/study.md, "Shifts". Blur
    kernels there follow :func:`default_blur_kernel_size`.

    >>> {k: s.describe() for k, s in paper_shifts(224).items()}
    {'jpeg': {'kind': 'jpeg', 'quality': 5}, 'blur': {'kind': 'blur', 'kernel_size': 5, 'sigma': 2.5}}
    >>> paper_shifts(32)["blur"].describe()
    {'kind': 'blur', 'kernel_size': 7, 'sigma': 0.7}
    """
    name = table_name(img_size)
    if name == "imagenet-c":
        return {key: Shift.from_dict(spec) for key, spec in PAPER_SHIFTS.items()}
    table = SEVERITY_TABLES[name]
    return {
        "jpeg": Shift("jpeg", quality=int(table["jpeg"][2])),
        "blur": Shift("blur", sigma=float(table["blur"][2])).resolved(img_size),
    }


def severity_table(img_size: int, kinds: Iterable[str] | None = None) -> dict[str, list[Shift]]:
    """Severity 1..5 shifts per kind from the table for ``img_size`` (see :func:`table_name`).

    ``kinds`` picks a subset (default: all of :data:`SHIFT_KINDS`). Blur kernels are resolved for
    ``img_size``; noise uses seed 0.

    >>> [s.quality for s in severity_table(32, ["jpeg"])["jpeg"]]
    [80, 65, 58, 50, 40]
    """
    name = table_name(img_size)
    table = SEVERITY_TABLES[name]
    wanted = list(SHIFT_KINDS if kinds is None else kinds)
    out: dict[str, list[Shift]] = {}
    for kind in wanted:
        if kind not in table:
            raise ConfigError(f"no severity table for shift kind {kind!r}; expected one of {', '.join(SHIFT_KINDS)}")
        values = table[kind]
        if kind == "jpeg":
            out[kind] = [Shift("jpeg", quality=int(v)) for v in values]
        elif kind == "blur":
            out[kind] = [Shift("blur", sigma=float(v)).resolved(img_size) for v in values]
        elif kind == "gaussian_noise":
            out[kind] = [Shift("gaussian_noise", sigma=float(v), seed=0) for v in values]
        else:
            out[kind] = [Shift(kind, factor=float(v)) for v in values]  # type: ignore[arg-type]
    return out
