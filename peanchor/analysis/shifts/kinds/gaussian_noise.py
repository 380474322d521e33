"""``gaussian_noise``: ImageNet-C's ``gaussian_noise``, on the [0, 1] scale ``clip(x + N(0, sigma²), 0, 1)``. The noise
comes from a ``torch.Generator`` seeded per image from ``(seed, image index)``, so the result does not depend on how a
set is chunked (torchvision's ``gaussian_noise`` takes no generator).

Imports: :mod:`peanchor.analysis.shifts.base`; torch inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import KINDS, NOISE_SEED, Param, ShiftKind, image_generator, to_uint8

if TYPE_CHECKING:
    import torch


@KINDS.register
class GaussianNoise(ShiftKind):
    name = "gaussian_noise"
    summary = "additive Gaussian noise, σ on the [0, 1] scale (ImageNet-C), seeded per image"
    params = (
        Param("sigma", float, "a finite number > 0", lambda s: s > 0, True, abbrev="s", metavar="S"),
        NOISE_SEED,
    )
    table_params = ("sigma",)
    # gaussian_noise() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (0.08, 0.12, 0.18, 0.26, 0.38),
        "tiny-imagenet-c": (0.04, 0.08, 0.12, 0.15, 0.18),
        "cifar-10-c": (0.04, 0.06, 0.08, 0.09, 0.10),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, sigma: float, seed: int) -> torch.Tensor:
        import torch

        b, c, h, w = images.shape
        noise = torch.empty((b, c, h, w), dtype=torch.float32)  # (B, C, H, W), N(0, 1) on the CPU
        for i in range(b):
            noise[i] = torch.randn((c, h, w), generator=image_generator(seed, start_index + i))
        x = images.to(torch.float32) + noise.to(images.device) * (sigma * 255.0)  # (B, C, H, W), 0..255 scale
        return to_uint8(x)
