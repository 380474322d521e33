"""``pixelate``: ImageNet-C's ``pixelate``, shrink to ``int(S * factor)`` pixels and enlarge back, with a box filter
both ways, as ImageNet-C does with Pillow's ``Image.resize(..., BOX)``.

Pillow's box filter (``Resample.c``): output pixel ``i`` of a resize from ``n`` to ``m`` pixels spans
``[i * n / m, (i + 1) * n / m)`` of the input, widened to at least one pixel, and averages, with equal weights, the
input pixels whose centre falls in it (Pillow's window and box test, in its floating-point steps, decide the pixels
on the border). Shrinking, that is a box average; enlarging, it is
the one input pixel under the output pixel's centre. :func:`box_weights` writes those weights as an ``(m, n)``
matrix, and the kernel applies it along the width and then the height, rounding half up after each, as Pillow does
(its fixed-point weights could still move a value by one grey level; on the photographs of
tests/analysis/shifts/test_kinds.py the two agree exactly).

Imports: :mod:`peanchor.analysis.shifts.base`; torch inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind, to_uint8

if TYPE_CHECKING:
    import torch

__all__ = ["box_weights"]


def box_weights(n: int, m: int) -> torch.Tensor:
    """``(m, n)`` float64 weights of a box-filter resize from ``n`` to ``m`` pixels along one axis; rows sum to 1.

    >>> box_weights(4, 2).tolist(), box_weights(2, 4).tolist()
    ([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]], [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])
    """
    import torch

    scale = n / m
    width = max(scale, 1.0)  # the box is at least one input pixel wide
    support = 0.5 * width
    centre = (torch.arange(m, dtype=torch.float64) + 0.5) * scale  # (m,) output centres in input coordinates
    pixel = torch.arange(n, dtype=torch.float64)  # (n,)
    # Pillow's window, then its box test, in its order of floating-point steps: a pixel centre that falls exactly on
    # the border of a span goes the same way.
    first, end = torch.floor(centre - support + 0.5)[:, None], torch.floor(centre + support + 0.5)[:, None]  # (m, 1)
    window = (pixel >= first) & (pixel < end)  # (m, n)
    offset = (pixel - centre[:, None] + 0.5) * (1.0 / width)  # (m, n)
    inside = (window & (offset > -0.5) & (offset <= 0.5)).to(torch.float64)  # (m, n)
    return inside / inside.sum(dim=1, keepdim=True)


@KINDS.register
class Pixelate(ShiftKind):
    name = "pixelate"
    summary = "box-filter shrink to factor × the side and enlarge back (ImageNet-C, Pillow's BOX)"
    params = (Param("factor", float, "in (0, 1]", lambda f: 0 < f <= 1, True, abbrev="f", metavar="F"),)
    table_params = ("factor",)
    # pixelate() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (0.6, 0.5, 0.4, 0.3, 0.25),
        "tiny-imagenet-c": (0.9, 0.8, 0.7, 0.6, 0.5),
        "cifar-10-c": (0.95, 0.9, 0.85, 0.75, 0.65),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, factor: float) -> torch.Tensor:
        import torch

        h, w = images.shape[-2:]
        small_h, small_w = max(1, int(h * factor)), max(1, int(w * factor))
        x = images.to("cpu", torch.float64)  # (B, C, H, W)
        # Shrink along the width, then the height, rounding half up after each (Pillow's order and rounding), then
        # enlarge: every weight there is 1, so that step is exact.
        x = torch.floor(x @ box_weights(w, small_w).T + 0.5)  # (B, C, H, w')
        x = torch.floor(box_weights(h, small_h) @ x + 0.5)  # (B, C, h', w')
        x = box_weights(small_h, h) @ x @ box_weights(small_w, w).T  # (B, C, H, W)
        return to_uint8(x).to(images.device)
