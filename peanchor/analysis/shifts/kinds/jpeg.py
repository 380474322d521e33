"""``jpeg``: encode and decode at ``quality`` with ``torchvision.io.encode_jpeg`` / ``decode_jpeg``, the codec behind
``torchvision.transforms.v2.JPEG`` (libjpeg, 4:2:0 chroma subsampling and the standard tables scaled by quality, as
Pillow's encoder uses; tests/analysis/shifts/test_kinds.py compares the two). It always runs on the CPU, so results do
not depend on the device or on nvjpeg.

Imports: :mod:`peanchor.analysis.shifts.base`; torch, torchvision inside the kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind

if TYPE_CHECKING:
    import torch


@KINDS.register
class Jpeg(ShiftKind):
    name = "jpeg"
    summary = "JPEG encode + decode (libjpeg, as torchvision's v2.JPEG)"
    params = (Param("quality", int, "an integer in 1..100", lambda q: 1 <= q <= 100, True, abbrev="q", metavar="Q"),)
    table_params = ("quality",)
    # jpeg_compression() in make_imagenet_c.py, make_tinyimagenet_c.py and make_cifar_c.py.
    tables = {
        "imagenet-c": (25, 18, 15, 10, 7),
        "tiny-imagenet-c": (65, 58, 50, 40, 25),
        "cifar-10-c": (80, 65, 58, 50, 40),
    }

    def kernel(self, images: torch.Tensor, start_index: int, *, quality: int) -> torch.Tensor:
        import torch
        from torchvision.io import decode_jpeg, encode_jpeg

        # libjpeg on the CPU for every device: GPU (nvjpeg) output differs and would split caches.
        cpu = images.detach().to("cpu").contiguous()  # (B, C, H, W)
        decoded = decode_jpeg(encode_jpeg(list(cpu), quality=quality))
        return torch.stack(decoded).to(images.device)  # (B, C, H, W)
