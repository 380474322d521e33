"""``pixelate``: ImageNet-C's ``pixelate``: shrink to ``int(S * factor)`` pixels and enlarge back. ImageNet-C uses PIL's
BOX filter both ways; torchvision's tensor resize has no box filter, so the shrink is an antialiased bilinear
``v2.functional.resize`` (slightly smoother than a box average) and the enlargement is ``NEAREST_EXACT`` (what a box
filter does when upsampling). ImageNet-C-style, not bit-exact.

Imports: :mod:`peanchor.analysis.shifts.base`; torchvision inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import Param, ShiftKind, register

if TYPE_CHECKING:
    import torch


@register
class Pixelate(ShiftKind):
    name = "pixelate"
    summary = "shrink to factor × the side and enlarge back (ImageNet-C-style)"
    params = (Param("factor", float, "in (0, 1]", lambda f: 0 < f <= 1, True, abbrev="f", metavar="F"),)
    table_params = ("factor",)
    # pixelate() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (0.6, 0.5, 0.4, 0.3, 0.25),
        "tiny-imagenet-c": (0.9, 0.8, 0.7, 0.6, 0.5),
        "cifar-10-c": (0.95, 0.9, 0.85, 0.75, 0.65),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, factor: float) -> torch.Tensor:
        from torchvision.transforms.v2 import InterpolationMode
        from torchvision.transforms.v2 import functional as TF

        h, w = images.shape[-2:]
        small = [max(1, int(h * factor)), max(1, int(w * factor))]
        x = TF.resize(images, small, interpolation=InterpolationMode.BILINEAR, antialias=True)  # (B, C, h', w')
        return TF.resize(x, [h, w], interpolation=InterpolationMode.NEAREST_EXACT, antialias=False)
