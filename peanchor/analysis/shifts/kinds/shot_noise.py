"""``shot_noise``: ImageNet-C's ``shot_noise`` (Poisson noise), on the [0, 1] scale ``clip(poisson(x * photons) /
photons, 0, 1)``: ``photons`` is the expected count of a white pixel, so fewer photons mean more noise. The counts come
from ``torch.poisson`` with a generator seeded per image from ``(seed, image index)``, as ``gaussian_noise``'s.

Imports: :mod:`peanchor.analysis.shifts.base`; torch inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import KINDS, NOISE_SEED, Param, ShiftKind, image_generator, to_uint8

if TYPE_CHECKING:
    import torch


@KINDS.register
class ShotNoise(ShiftKind):
    name = "shot_noise"
    summary = "Poisson noise, photons = the expected count of a white pixel (ImageNet-C), seeded per image"
    params = (
        Param("photons", float, "a finite number > 0", lambda c: c > 0, True, abbrev="p", metavar="P"),
        NOISE_SEED,
    )
    table_params = ("photons",)
    # shot_noise() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (60, 25, 12, 5, 3),
        "tiny-imagenet-c": (250, 100, 50, 30, 15),
        "cifar-10-c": (500, 250, 100, 75, 50),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, photons: float, seed: int) -> torch.Tensor:
        import torch

        rate = images.to("cpu", torch.float64) * (photons / 255.0)  # (B, C, H, W): expected counts, x * photons
        counts = torch.stack([torch.poisson(r, generator=image_generator(seed, start_index + i))
                              for i, r in enumerate(rate)])  # fmt: skip
        return to_uint8(counts * (255.0 / photons)).to(images.device)  # (B, C, H, W)
