"""``blur``: ``torchvision.transforms.v2.functional.gaussian_blur`` (the kernel behind ``v2.GaussianBlur``) with a
square kernel of odd size ``kernel_size`` and standard deviation ``sigma``, reflect padding. Without ``kernel_size``,
:func:`default_blur_kernel_size` picks ``2 * int(4 * sigma + 0.5) + 1``, the radius rule of
``skimage.filters.gaussian`` (``truncate=4``) with which ImageNet-C made its Gaussian blur, capped to the largest odd
size not above the image side. skimage padded with ``nearest`` where torchvision reflects, so the outermost pixels
differ slightly from ImageNet-C's files.

Imports: :mod:`peanchor.analysis.shifts.base`, :mod:`peanchor.core.errors`; torchvision inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind
from peanchor.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["default_blur_kernel_size"]


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


def _check_fits(kernel_size: int, side: int) -> None:
    if kernel_size // 2 >= side:
        raise ConfigError(f"blur kernel_size {kernel_size} is too large for {side} px images "
                          f"(needs kernel_size // 2 < {side})")  # fmt: skip


@KINDS.register
class Blur(ShiftKind):
    name = "blur"
    summary = "Gaussian blur (torchvision's gaussian_blur, reflect padding)"
    params = (
        Param("kernel_size", int, "an odd positive integer", lambda k: k >= 1 and k % 2 == 1, abbrev="k", metavar="K"),
        Param("sigma", float, "a finite number > 0", lambda s: s > 0, True, abbrev="s", metavar="S"),
    )
    table_params = ("sigma",)
    # gaussian_blur() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (1, 2, 3, 4, 6),
        "tiny-imagenet-c": (0.5, 0.75, 1, 1.25, 1.5),
        "cifar-10-c": (0.4, 0.6, 0.7, 0.8, 1.0),
    }

    def resolve(self, values: dict[str, Any], img_size: int) -> dict[str, Any]:
        if values["kernel_size"] is None:
            return {**values, "kernel_size": default_blur_kernel_size(values["sigma"], img_size)}
        _check_fits(values["kernel_size"], img_size)
        return values

    def kernel(self, images: torch.Tensor, start_index: int, *, kernel_size: int | None, sigma: float) -> torch.Tensor:
        from torchvision.transforms.v2 import functional as TF

        side = min(images.shape[-2:])
        k = kernel_size if kernel_size is not None else default_blur_kernel_size(sigma, side)
        _check_fits(k, side)
        return TF.gaussian_blur(images, kernel_size=[k, k], sigma=[sigma, sigma])
