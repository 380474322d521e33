"""Image transforms on uint8 tensors: per-item torchvision v2 pipelines and a batched equivalent.

Every dataset yields uint8 ``(3, S, S)`` at the model resolution ``S``. The eval split is always
``Resize((S, S), antialias=True)`` as in the paper. The train split gets one of a few light policies:

========== =====================================================================================
none       the eval transform
flip       Resize((S, S)) + horizontal flip
translate  Resize((S, S)) + shift by up to S/16 px with edge padding (scenes: keeps sky above ground, no flip)
crop_flip  Resize((S, S)) + RandomCrop(S, padding=S/8) + flip (CIFAR: RandomCrop(32, padding=4))
rrc_flip   RandomResizedCrop(S, scale=(0.35, 1)) + flip (ImageNet-scale)
========== =====================================================================================

:func:`train_transform` builds the per-item v2 pipeline (used for image files, which arrive at
arbitrary sizes). :func:`batch_augment` applies the same policy to a whole uint8 batch that is
already ``S x S`` in a few vectorised ops (used by array-backed datasets: scenes, CIFAR, prepared),
on CPU or GPU.

Imports: torch, torchvision; :mod:`peanchor.data.spec`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torchvision.transforms import v2

from peanchor.data.spec import AUGMENT_POLICIES
from peanchor.core.errors import ConfigError

# The paper normalises with the ImageNet statistics; peanchor uses them for every dataset so that
# a model's input distribution never depends on which dataset computed its statistics.
IMAGENET_MEAN: tuple[float, float, float] = (0.485, 0.456, 0.406)
IMAGENET_STD: tuple[float, float, float] = (0.229, 0.224, 0.225)

RRC_SCALE: tuple[float, float] = (0.35, 1.0)
RRC_RATIO: tuple[float, float] = (3 / 4, 4 / 3)
RRC_ATTEMPTS = 10  # (area, ratio) draws before the fallback, as torchvision's RandomResizedCrop

DEFAULT_AUGMENT: dict[str, str] = {
    "scenes": "translate",  # L, F, Z and C are not mirror-symmetric: a flip would change the class
    "cifar10": "crop_flip",
    "cifar100": "crop_flip",
    "imagenet100": "rrc_flip",
}


def resolve_augment(dataset: str, augment: str, img_size: int) -> str:
    """The concrete policy for ``augment`` ("auto" → the dataset's default, by resolution for folders)."""
    if augment not in AUGMENT_POLICIES:
        raise ConfigError(f"data.augment={augment!r}: expected one of {', '.join(AUGMENT_POLICIES)}")
    if augment != "auto":
        return augment
    if dataset in DEFAULT_AUGMENT:
        return DEFAULT_AUGMENT[dataset]
    return "rrc_flip" if img_size >= 96 else "crop_flip"


def translate_padding(img_size: int) -> int:
    return max(1, img_size // 16)


def crop_padding(img_size: int) -> int:
    return max(1, img_size // 8)


def eval_transform(img_size: int) -> v2.Transform:
    """The paper's evaluation preprocessing: ``Resize((S, S))`` with antialiasing, uint8 in and out."""
    return v2.Resize((img_size, img_size), antialias=True)


def train_transform(policy: str, img_size: int) -> v2.Transform:
    """The per-item training pipeline for a concrete ``policy`` (see :func:`resolve_augment`)."""
    size = img_size
    resize = eval_transform(size)
    flip = v2.RandomHorizontalFlip()
    if policy == "none":
        return resize
    if policy == "flip":
        return v2.Compose([resize, flip])
    if policy == "translate":
        return v2.Compose([resize, v2.RandomCrop(size, padding=translate_padding(size), padding_mode="edge")])
    if policy == "crop_flip":
        return v2.Compose([resize, v2.RandomCrop(size, padding=crop_padding(size)), flip])
    if policy == "rrc_flip":
        return v2.Compose([v2.RandomResizedCrop(size, scale=RRC_SCALE, ratio=RRC_RATIO, antialias=True), flip])
    raise ConfigError(f"augmentation policy {policy!r}: expected one of {', '.join(AUGMENT_POLICIES[1:])}")


def _uniform(
    shape: tuple[int, ...], low: float, high: float, generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    return torch.rand(shape, generator=generator, device=device) * (high - low) + low


def _shift_batch(
    images: torch.Tensor, max_shift: int, *, edge: bool, flip: bool, generator: torch.Generator | None
) -> torch.Tensor:
    """RandomCrop(S, padding=max_shift) per sample by index arithmetic: exact uint8, no float round trip."""
    b, _, h, w = images.shape
    dev = images.device
    shift = torch.randint(-max_shift, max_shift + 1, (b, 2), generator=generator, device=dev)  # (B, 2)
    rows = torch.arange(h, device=dev)[None, :] + shift[:, :1]  # (B, H) source row of each output row
    cols = torch.arange(w, device=dev)[None, :] + shift[:, 1:]  # (B, W)
    if flip:
        flipped = torch.rand(b, generator=generator, device=dev) < 0.5
        cols = torch.where(flipped[:, None], cols.flip(-1), cols)
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]  # (B, H, W)
    rows, cols = rows.clamp(0, h - 1), cols.clamp(0, w - 1)
    out = images[
        torch.arange(b, device=dev)[:, None, None, None],
        torch.arange(3, device=dev)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]  # (B, 3, H, W)
    if not edge:  # constant padding with 0, as torchvision's RandomCrop(padding=p)
        out = out * inside[:, None].to(out.dtype)
    return out


def _resized_crop_batch(images: torch.Tensor, flip: bool, generator: torch.Generator | None) -> torch.Tensor:
    """RandomResizedCrop(S, RRC_SCALE, RRC_RATIO) (+ flip) per sample through one affine grid_sample.

    As torchvision's: up to :data:`RRC_ATTEMPTS` (area, log-uniform ratio) draws per sample, the first that fits
    in the image is kept; when none does, the centre crop of the whole image at the nearest allowed ratio. The
    crop's place is uniform over where it fits. Crops are continuous (torchvision's are whole pixels) and at most
    the full image, so the resampling only ever upsamples and needs no antialiasing.
    """
    b = images.shape[0]
    dev = images.device
    scale, ratio = RRC_SCALE, RRC_RATIO
    area = _uniform((b, RRC_ATTEMPTS), *scale, generator, dev)  # (B, T) fraction of the image area
    aspect = _uniform((b, RRC_ATTEMPTS), math.log(ratio[0]), math.log(ratio[1]), generator, dev).exp()  # (B, T)
    widths, heights = (area * aspect).sqrt(), (area / aspect).sqrt()  # (B, T) fractions of the image side
    fits = (widths <= 1) & (heights <= 1)  # (B, T)
    first = fits.int().argmax(dim=1, keepdim=True)  # (B, 1) the first draw that fits (0 when none does)
    fallback = ~fits.any(dim=1)  # (B,)
    # the fallback of a square image: full width and height unless the ratios allowed exclude 1
    width = torch.where(fallback, min(1.0, ratio[1]), widths.gather(1, first)[:, 0])  # (B,)
    height = torch.where(fallback, min(1.0, 1 / ratio[0]), heights.gather(1, first)[:, 0])  # (B,)
    cx = (torch.rand(b, generator=generator, device=dev) * 2 - 1) * (1 - width)  # crop centre in [-1, 1]
    cy = (torch.rand(b, generator=generator, device=dev) * 2 - 1) * (1 - height)
    cx, cy = cx.masked_fill(fallback, 0.0), cy.masked_fill(fallback, 0.0)  # the fallback is centred
    sign = torch.ones(b, device=dev)
    if flip:
        sign = torch.where(torch.rand(b, generator=generator, device=dev) < 0.5, -sign, sign)
    theta = torch.zeros(b, 2, 3, device=dev)
    theta[:, 0, 0], theta[:, 0, 2] = width * sign, cx
    theta[:, 1, 1], theta[:, 1, 2] = height, cy
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)  # (B, S, S, 2)
    out = F.grid_sample(images.float(), grid, mode="bilinear", padding_mode="border", align_corners=False)
    return out.round_().clamp_(0, 255).to(torch.uint8)


def batch_augment(images: torch.Tensor, policy: str, generator: torch.Generator | None = None) -> torch.Tensor:
    """Apply a training ``policy`` to a uint8 batch ``(B, 3, S, S)`` that is already at the model size.

    Same distribution as :func:`train_transform` minus the resize; works on any device.

    >>> x = torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8)
    >>> batch_augment(x, "crop_flip").shape, batch_augment(x, "none") is x
    (torch.Size([4, 3, 16, 16]), True)
    """
    if images.dtype != torch.uint8 or images.ndim != 4:
        raise ValueError(f"batch_augment expects uint8 (B, 3, S, S), got {images.dtype} {tuple(images.shape)}")
    size = images.shape[-1]
    if policy == "none" or images.shape[0] == 0:
        return images
    if policy == "flip":
        flipped = torch.rand(images.shape[0], generator=generator, device=images.device) < 0.5
        return torch.where(flipped[:, None, None, None], images.flip(-1), images)
    if policy == "translate":
        return _shift_batch(images, translate_padding(size), edge=True, flip=False, generator=generator)
    if policy == "crop_flip":
        return _shift_batch(images, crop_padding(size), edge=False, flip=True, generator=generator)
    if policy == "rrc_flip":
        return _resized_crop_batch(images, flip=True, generator=generator)
    raise ConfigError(f"augmentation policy {policy!r}: expected one of {', '.join(AUGMENT_POLICIES[1:])}")
