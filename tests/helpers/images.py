"""Images for the tests: synthetic photo-like batches (:func:`textured`), image files written for the data tests and
the pixels read back (with Pillow: torchvision's encoders are deprecated from 0.29 on)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torchvision.transforms.v2 import functional as TF


def random_image(h: int, w: int, seed: int) -> Image.Image:
    """An ``h`` x ``w`` RGB image of uniform random pixels, the same for the same ``seed``."""
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def write_jpeg(path: Path, h: int = 12, w: int = 10, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    random_image(h, w, seed).save(path, format="JPEG", quality=90)


def write_png(path: Path, h: int = 9, w: int = 14, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    random_image(h, w, seed).save(path, format="PNG")


def read_image(path: Path) -> torch.Tensor:
    """The file's pixels as uint8 ``(3, H, W)``."""
    with Image.open(path) as img:
        return TF.pil_to_tensor(img.convert("RGB"))


def all_items(dataset) -> tuple[torch.Tensor, list[int]]:
    """Every ``(image, label)`` of ``dataset``: the images stacked, the labels as a list."""
    items = [dataset[i] for i in range(len(dataset))]
    return torch.stack([x for x, _ in items]), [y for _, y in items]


def make_folder_tree(root: Path, classes=("cat", "dog", "eel"), n_train=3, n_val=2) -> None:
    """An ImageFolder tree ``root/{train,val}/<class>/``: ``n_train`` / ``n_val`` images a class, JPEGs (``.JPG``,
    of varying heights) and PNGs in turn."""
    seed = 0
    for split, n in (("train", n_train), ("val", n_val)):
        for c in classes:
            for i in range(n):
                seed += 1
                if i % 2:
                    write_png(root / split / c / f"{i}.png", seed=seed)
                else:
                    write_jpeg(root / split / c / f"{i}.JPG", h=10 + i, w=13, seed=seed)


def textured(n: int, size: int, seed: int = 0) -> torch.Tensor:
    """Natural-ish uint8 images (n, 3, size, size): smooth colour gradients, a luminance texture shared by the
    channels (as in photos, so chroma subsampling alone does not dominate JPEG error) and mild sensor noise."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    out = []
    for _ in range(n):
        fx, fy, phase = (torch.rand(3, generator=g) * torch.tensor([0.8, 0.8, 6.0])).tolist()
        luminance = 50 * torch.sin(xx * (0.2 + fx) + phase) * torch.cos(yy * (0.2 + fy))  # (S, S)
        blocks = torch.rand(1, size // 4, size // 4, generator=g) * 60 - 30
        luminance = luminance + blocks.repeat_interleave(4, 1).repeat_interleave(4, 2)[0]
        colour = 128 + 40 * torch.rand(3, 1, 1, generator=g) * (xx + yy)[None] / (2 * size)  # (3, S, S)
        img = colour + luminance[None] + torch.randn(3, size, size, generator=g) * 3
        out.append(img.clamp(0, 255).round().to(torch.uint8))
    return torch.stack(out)  # (n, 3, S, S)


def striped_scenes(n: int, seed: int, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images with a bright band across the top rows and a square whose channel is the label: content
    that carries position, which a model learns in a few steps."""
    g = torch.Generator().manual_seed(seed)
    x = (torch.rand(n, 3, size, size, generator=g) * 50).to(torch.uint8)
    x[:, 1, : size // 4] += 180
    labels = torch.randint(0, 2, (n,), generator=g)
    side = size // 3
    for k, (r, c) in enumerate(torch.randint(0, size - side, (n, 2), generator=g).tolist()):
        x[k, 2 * int(labels[k]), r : r + side, c : c + side] = 255
    return x, labels


def moved_in_pixels(x: torch.Tensor, grid: tuple[int, int], patch: int, perm: torch.Tensor) -> torch.Tensor:
    """``x`` ``(B, C, rows * patch, cols * patch)`` with its ``patch`` x ``patch`` patches moved in pixel space:
    slot ``i`` (row-major over ``grid``) shows what slot ``perm[i]`` showed; what RPI does to the tokens."""
    b, c, (rows, cols) = x.shape[0], x.shape[1], grid
    patches = x.unfold(2, patch, patch).unfold(3, patch, patch).reshape(b, c, rows * cols, patch, patch)
    moved = patches[:, :, perm].reshape(b, c, rows, cols, patch, patch)
    return moved.permute(0, 1, 2, 4, 3, 5).reshape(b, c, rows * patch, cols * patch)
