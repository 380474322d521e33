"""``brightness``: ImageNet-C's brightness, ``c`` added to the HSV value of every pixel (clipped to [0, 1]), hue
and saturation kept.

With ``v = max(r, g, b)``, hue and saturation fixed, every channel is proportional to ``v``, so the HSV round trip
of the generation scripts (``skimage.color.rgb2hsv`` → ``v + c`` → ``hsv2rgb``) is ``rgb · v' / v`` with
``v' = min(v + c, 1)``; a black pixel (``v = 0``, no hue, no saturation) becomes grey ``v'``. The kernel computes
that directly, in float32, and rounds to uint8 like the built-in kinds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind, to_uint8

if TYPE_CHECKING:
    import torch


@KINDS.register
class Brightness(ShiftKind):
    name = "brightness"
    summary = "c added to each pixel's HSV value, hue and saturation kept (ImageNet-C)"
    params = (Param("c", float, "in [0, 1]", lambda c: 0 <= c <= 1, True, abbrev="c", metavar="C"),)
    table_params = ("c",)
    # brightness() in hendrycks/robustness ImageNet-C/create_c: make_imagenet_c.py and make_tinyimagenet_c.py
    # (c = [.1, .2, .3, .4, .5]), make_cifar_c.py (c = [.05, .1, .15, .2, .3]).
    tables = {
        "imagenet-c": (0.1, 0.2, 0.3, 0.4, 0.5),
        "tiny-imagenet-c": (0.1, 0.2, 0.3, 0.4, 0.5),
        "cifar-10-c": (0.05, 0.1, 0.15, 0.2, 0.3),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, c: float) -> torch.Tensor:
        return brightness(images, c)


def brightness(images: torch.Tensor, c: float) -> torch.Tensor:
    """The kernel as a function: uint8 ``(B, 3, H, W)`` → uint8, each pixel's HSV value raised by ``c``."""
    import torch

    x = images.to(torch.float32) / 255.0  # (B, 3, H, W)
    v = x.amax(dim=1, keepdim=True)  # (B, 1, H, W): the HSV value
    raised = (v + c).clamp(max=1.0)
    scaled = x * (raised / v.clamp(min=1e-12))
    return to_uint8(torch.where(v > 0, scaled, raised.expand_as(x)) * 255.0)
