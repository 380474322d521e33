"""``defocus_blur``: ImageNet-C's ``defocus_blur``, each channel convolved with an anti-aliased disk.

The disk is ImageNet-C's ``disk(radius, alias_blur)``: on the integer grid ``-8..8`` (``-radius..radius`` for a radius
above 8), the points with ``x² + y² <= radius²``, normalised to sum 1, then blurred with a Gaussian of standard
deviation ``alias_blur`` and a 3 × 3 kernel (5 × 5 for a radius above 8), reflect borders (OpenCV's
``GaussianBlur``; here ``v2.functional.gaussian_blur``). The image is convolved with it per channel, reflect borders
(OpenCV's ``filter2D``); the disk's all-zero border rows and columns are dropped first, which changes nothing but
lets small images take small disks.

Imports: :mod:`peanchor.analysis.shifts.base`, :mod:`peanchor.core.errors`; torch, torchvision inside the kernel.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind, to_uint8
from peanchor.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

__all__ = ["disk"]


def disk(radius: float, alias_blur: float) -> torch.Tensor:
    """The anti-aliased disk ``(K, K)`` (float32, odd K), without its all-zero border.

    >>> disk(0.5, 0.5).shape, round(float(disk(3, 0.1).sum()), 4)
    (torch.Size([3, 3]), 1.0)
    """
    import torch
    from torchvision.transforms.v2 import functional as TF

    half = 8 if radius <= 8 else int(radius)
    ksize = 3 if radius <= 8 else 5
    grid = torch.arange(-half, half + 1, dtype=torch.float32)  # (K,)
    inside = (grid[None, :] ** 2 + grid[:, None] ** 2 <= radius**2).to(torch.float32)  # (K, K)
    aliased = TF.gaussian_blur((inside / inside.sum())[None], [ksize, ksize], [alias_blur, alias_blur])[0]  # (K, K)
    keep = aliased.abs().sum(dim=0) > 0  # (K,): the same for rows, the disk being symmetric
    lo, hi = int(keep.nonzero().min()), int(keep.nonzero().max())
    return aliased[lo : hi + 1, lo : hi + 1]


def _on_the_grid(radius: float) -> bool:
    # Above 8 the script's grid is -radius..radius: a whole radius keeps it on pixel centres (and the disk odd).
    return radius > 0 and (radius <= 8 or radius == int(radius))


@KINDS.register
class DefocusBlur(ShiftKind):
    name = "defocus_blur"
    summary = "convolution with an anti-aliased disk of radius R px (ImageNet-C)"
    params = (
        Param("radius", float, "a finite number > 0, and whole above 8", _on_the_grid, True, abbrev="r", metavar="R"),
        Param("alias_blur", float, "a finite number > 0", lambda a: a > 0, default=0.1, abbrev="a", metavar="A"),
    )
    table_params = ("radius", "alias_blur")
    # defocus_blur() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py: (radius, alias_blur).
    tables = {
        "imagenet-c": ((3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)),
        "tiny-imagenet-c": ((0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)),
        "cifar-10-c": ((0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)),
    }

    def resolve(self, values: dict[str, Any], img_size: int) -> dict[str, Any]:
        _check_fits(values["radius"], img_size)
        return values

    def kernel(self, images: torch.Tensor, start_index: int, *, radius: float, alias_blur: float) -> torch.Tensor:
        import torch
        import torch.nn.functional as F

        _check_fits(radius, min(images.shape[-2:]))
        weights = disk(radius, alias_blur)  # (K, K)
        c, pad = images.shape[1], weights.shape[0] // 2
        x = F.pad(images.to("cpu", torch.float32), (pad, pad, pad, pad), mode="reflect")  # (B, C, H + 2p, W + 2p)
        out = F.conv2d(x, weights.expand(c, 1, *weights.shape), groups=c)  # (B, C, H, W)
        return to_uint8(out).to(images.device)


def _check_fits(radius: float, side: int) -> None:
    # Reflect padding needs the disk's half-width (its points, plus one pixel of alias blur up to the grid's edge 8)
    # to stay inside the image.
    reach = min(8, math.floor(radius) + 1) if radius <= 8 else int(radius)
    if reach >= side:
        raise ConfigError(f"defocus_blur radius {radius:g} is too large for {side} px images (its disk reaches "
                          f"{reach} px from the centre; needs < {side})")  # fmt: skip
