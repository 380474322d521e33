"""``contrast``: ImageNet-C's ``contrast``, ``clip((x - m) * factor + m)`` with ``m`` the mean of each channel of each
image over its pixels. ``v2.functional.adjust_contrast`` is *not* used: it blends towards the mean of the greyscale
image, which is another corruption.

Imports: :mod:`peanchor.analysis.shifts.base`; torch inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind, to_uint8

if TYPE_CHECKING:
    import torch


@KINDS.register
class Contrast(ShiftKind):
    name = "contrast"
    summary = "each channel scaled about its own mean (ImageNet-C)"
    params = (Param("factor", float, ">= 0", lambda f: f >= 0, True, abbrev="f", metavar="F"),)
    table_params = ("factor",)
    # contrast() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (0.4, 0.3, 0.2, 0.1, 0.05),
        "tiny-imagenet-c": (0.4, 0.3, 0.2, 0.1, 0.05),
        "cifar-10-c": (0.75, 0.5, 0.4, 0.3, 0.15),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, factor: float) -> torch.Tensor:
        import torch

        x = images.to(torch.float32)  # (B, C, H, W)
        mean = x.mean(dim=(-2, -1), keepdim=True)  # (B, C, 1, 1): per image and channel, as ImageNet-C
        return to_uint8((x - mean) * factor + mean)
