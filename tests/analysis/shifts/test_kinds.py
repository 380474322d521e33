"""The shifts against references peanchor did not write, on a real photograph (four crops of matplotlib's
``grace_hopper.jpg``) at 224 px and at 32 px: JPEG against Pillow's codec, blur against scipy's Gaussian filter,
contrast and Gaussian noise against ImageNet-C's formulas, pixelate against Pillow's BOX resize; and the severity
tables against Hendrycks & Dietterich's generation scripts, quoted below.

Every float result is compared with peanchor's one documented departure applied: rounding to the nearest grey level
where ImageNet-C truncates (``np.uint8``)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import scipy.ndimage
import scipy.stats
import torch
from PIL import Image, JpegImagePlugin

from peanchor.analysis.shifts import PAPER_SHIFTS, TABLE_RESOLUTION, Shift, severity_table

SIZES = (224, 32)

# Severity rows quoted from hendrycks/robustness at 8190fe329f5f072a06e3a2aea02bb5dda69aed9f, ImageNet-C/create_c/
# (the `c = [...]` line of each function). Each kind's new tests (kinds/test_<kind>.py) quote their own.
QUOTED = {
    "imagenet-c": {  # make_imagenet_c.py
        "gaussian_noise": [.08, .12, 0.18, 0.26, 0.38],  # gaussian_noise(), line 250
        "blur": [1, 2, 3, 4, 6],  # gaussian_blur(), line 290
        "contrast": [0.4, .3, .2, .1, .05],  # contrast(), line 490
        "jpeg": [25, 18, 15, 10, 7],  # jpeg_compression(), line 520
        "pixelate": [0.6, 0.5, 0.4, 0.3, 0.25],  # pixelate(), line 530
    },
    "tiny-imagenet-c": {  # make_tinyimagenet_c.py
        "gaussian_noise": [0.04, 0.08, .12, .15, .18],  # gaussian_noise(), line 249
        "blur": [.5, .75, 1, 1.25, 1.5],  # gaussian_blur(), line 277
        "contrast": [.4, .3, .2, .1, 0.05],  # contrast(), line 452
        "jpeg": [65, 58, 50, 40, 25],  # jpeg_compression(), line 482
        "pixelate": [0.9, 0.8, 0.7, 0.6, 0.5],  # pixelate(), line 492
    },
    "cifar-10-c": {  # make_cifar_c.py
        "gaussian_noise": [0.04, 0.06, .08, .09, .10],  # gaussian_noise(), line 131
        "blur": [.4, .6, 0.7, .8, 1],  # gaussian_blur(), line 159
        "contrast": [.75, .5, .4, .3, 0.15],  # contrast(), line 334
        "jpeg": [80, 65, 58, 50, 40],  # jpeg_compression(), line 364
        "pixelate": [0.95, 0.9, 0.85, 0.75, 0.65],  # pixelate(), line 374
    },
}
MAIN = {"gaussian_noise": "sigma", "blur": "sigma", "contrast": "factor", "jpeg": "quality", "pixelate": "factor"}


@pytest.mark.parametrize("table", QUOTED)
def test_the_severity_tables_are_the_generation_scripts(table):
    size = TABLE_RESOLUTION[table]
    shifts = severity_table(size, list(QUOTED[table]))
    for kind, quoted in QUOTED[table].items():
        assert [s.describe()[MAIN[kind]] for s in shifts[kind]] == quoted, (table, kind)


def as_hwc(images: torch.Tensor) -> np.ndarray:
    return images.permute(0, 2, 3, 1).numpy()  # (B, H, W, C)


def table_values(size: int, kind: str) -> list:
    return [s.describe()[MAIN[kind]] for s in severity_table(size, [kind])[kind]]


# ---- JPEG: Pillow's codec ----------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_jpeg_is_pillows_codec_at_the_same_quality(photos, size):
    """The same codec with the same settings: the quantisation tables and the 4:2:0 chroma subsampling in the two
    files are equal, and the decoded pixels too. The tolerance is zero: both run libjpeg(-turbo) with its defaults
    (integer DCT, fancy upsampling), measured bit-identical at every quality below; any difference would mean
    another codec or other settings, which would change every FS measured under JPEG."""
    from torchvision.io import encode_jpeg

    x = photos(size)
    for quality in sorted({*table_values(224, "jpeg"), *table_values(32, "jpeg"), PAPER_SHIFTS["jpeg"]["quality"]}):
        ours = as_hwc(Shift("jpeg", quality=quality)(x))
        for i, image in enumerate(as_hwc(x)):
            buffer = io.BytesIO()
            Image.fromarray(image).save(buffer, "JPEG", quality=quality)
            pillow = Image.open(buffer)
            torchvision_file = Image.open(io.BytesIO(encode_jpeg(x[i], quality=quality).numpy().tobytes()))
            assert torchvision_file.quantization == pillow.quantization, quality
            assert JpegImagePlugin.get_sampling(torchvision_file) == JpegImagePlugin.get_sampling(pillow) == 2  # 4:2:0
            np.testing.assert_array_equal(ours[i], np.asarray(pillow.convert("RGB")), err_msg=f"quality {quality}")


# ---- blur: scipy ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_blur_is_scipys_gaussian_filter(photos, size):
    """``scipy.ndimage.gaussian_filter`` with the same σ, its default radius int(4σ + 0.5) (skimage's, hence
    ImageNet-C's) and ``mirror`` padding (torchvision's ``reflect``), within half a grey level before rounding."""
    x = photos(size)
    image = x.numpy().astype(np.float64)  # (B, C, H, W)
    shifts = [*severity_table(size, ["blur"])["blur"], Shift.from_dict(PAPER_SHIFTS["blur"])]
    for shift in shifts:
        radius = None if shift in shifts[:5] else shift.kernel_size // 2  # the table's use the default radius
        reference = scipy.ndimage.gaussian_filter(image, sigma=shift.sigma, axes=(2, 3), mode="mirror", radius=radius)
        ours = shift(x).numpy()
        assert np.abs(ours - reference).max() <= 0.5 + 1e-3, shift.name
        assert (ours == np.round(reference)).mean() > 0.999, shift.name


# ---- contrast: ImageNet-C's formula ------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_contrast_is_imagenet_c_formula(photos, size):
    x = photos(size)
    for c in [*table_values(size, "contrast"), 0.0, 1.0, 1.7]:
        # contrast() in make_imagenet_c.py: x / 255, means over the image's pixels per channel, clip((x - m) c + m).
        image = as_hwc(x) / 255.0  # (B, H, W, C)
        means = np.mean(image, axis=(1, 2), keepdims=True)
        reference = np.clip((image - means) * c + means, 0, 1) * 255
        ours = as_hwc(Shift("contrast", factor=c)(x))
        assert np.abs(ours - reference).max() <= 0.5 + 1e-3, c


# ---- Gaussian noise: ImageNet-C's formula, in distribution ----------------------------------------------------
def clipping_counts(observed: np.ndarray, p_low: np.ndarray, p_high: np.ndarray) -> None:
    """The number of pixels clipped to 0 and to 255 against their exact expectation (sums of per-pixel
    probabilities), within 4 standard deviations of the sum of those Bernoulli trials, plus one."""
    for count, p in (((observed == 0).sum(), p_low), ((observed == 255).sum(), p_high)):
        assert abs(count - p.sum()) <= 4 * np.sqrt((p * (1 - p)).sum()) + 1, (count, p.sum())


def same_distribution(ours: np.ndarray, reference: np.ndarray, x: np.ndarray) -> None:
    """The change ``output - input`` of unclipped pixels, ours against the formula's drawn with numpy's generator:
    a two-sample Kolmogorov-Smirnov test (seeded, so it passes or fails the same way every run)."""
    keep_ours, keep_ref = (ours > 0) & (ours < 255), (reference > 0) & (reference < 255)
    change_ours, change_ref = (ours - x)[keep_ours], (reference - x)[keep_ref]
    assert scipy.stats.ks_2samp(change_ours, change_ref).pvalue > 1e-3


@pytest.mark.parametrize("size", SIZES)
def test_gaussian_noise_follows_imagenet_c_formula(photos, size):
    x = photos(size)
    pixels = x.numpy().astype(np.float64)  # (B, C, H, W) on the 0..255 scale
    rng = np.random.default_rng(0)
    for sigma in table_values(size, "gaussian_noise"):
        ours = Shift("gaussian_noise", sigma=sigma, seed=0)(x).numpy().astype(np.float64)
        # gaussian_noise() in make_imagenet_c.py: clip(x / 255 + normal(scale=c), 0, 1) * 255; rounded here.
        reference = np.round(np.clip(pixels / 255 + rng.normal(size=pixels.shape, scale=sigma), 0, 1) * 255)
        same_distribution(ours, reference, pixels)
        s = sigma * 255  # the output is 0 when x + s z < 0.5 and 255 when x + s z >= 254.5
        clipping_counts(ours, scipy.stats.norm.cdf((0.5 - pixels) / s), scipy.stats.norm.sf((254.5 - pixels) / s))


def test_gaussian_noise_has_the_formulas_standard_deviation():
    """On a flat mid-grey image (nothing clipped), the change is round(255 σ z): its standard deviation is
    sqrt((255 σ)² + 1/12) (Sheppard's correction for the rounding), here to within 3 standard errors (0.25 %)."""
    x = torch.full((1, 3, 512, 512), 128, dtype=torch.uint8)
    change = Shift("gaussian_noise", sigma=0.04, seed=5)(x).double() - 128  # σ 10.2 grey levels: 12 σ from a bound
    expected = np.sqrt((0.04 * 255) ** 2 + 1 / 12)
    assert abs(change.std().item() / expected - 1) < 3 / np.sqrt(2 * change.numel())
    assert abs(change.mean().item()) < 3 * expected / np.sqrt(change.numel())


# ---- pixelate: Pillow's BOX resize ----------------------------------------------------------------------------
@pytest.mark.parametrize("size", SIZES)
def test_pixelate_is_pillows_box_resize_down_and_up(photos, size):
    """ImageNet-C's pixelate(): ``resize((int(S c), int(S c)), BOX)`` then ``resize((S, S), BOX)``; within one grey
    level (Pillow's fixed-point weights), and measured equal on these photographs."""
    x = photos(size)
    for factor in [*table_values(size, "pixelate"), 0.37, 0.81, 1.0]:
        small = max(1, int(size * factor))
        reference = np.stack([np.asarray(Image.fromarray(a).resize((small, small), Image.BOX).resize((size, size),
                              Image.BOX)) for a in as_hwc(x)]).astype(int)  # fmt: skip
        difference = np.abs(as_hwc(Shift("pixelate", factor=factor)(x)).astype(int) - reference)
        assert difference.max() <= 1 and (difference > 0).mean() < 1e-3, factor


def test_box_weights_are_pillows_for_every_pair_of_sizes():
    """Pillow's BOX resize of an identity image (one white pixel per row) reads out its weights: resizing from n to m
    pixels, row j holds 255 × the weights of input pixel j. Every n, m in 1..40."""
    from peanchor.analysis.shifts.kinds.pixelate import box_weights

    for n in range(1, 41):
        identity = Image.fromarray(np.eye(n, dtype=np.uint8) * 255)  # (n, n): row j is input pixel j
        for m in range(1, 41):
            pillow = np.asarray(identity.resize((m, n), Image.BOX)).astype(np.float64)  # (n, m): only the width
            ours = 255 * box_weights(n, m).numpy().T  # (n, m)
            assert np.abs(pillow - ours).max() <= 0.5 + 1e-6, (n, m)


def test_pixelate_down_to_one_pixel(photos):
    x = photos(32)
    for factor in (0.01, 0.04):  # int(32 × factor) = 0 and 1: a single pixel, the image's mean colour
        reference = np.stack([np.asarray(Image.fromarray(a).resize((1, 1), Image.BOX).resize((32, 32), Image.BOX))
                              for a in as_hwc(x)]).astype(int)  # fmt: skip
        assert np.abs(as_hwc(Shift("pixelate", factor=factor)(x)).astype(int) - reference).max() <= 1


def test_pixelate_box_filter_on_a_non_square_photo(photos):
    x = photos(64)[:, :, 5:45, :]  # (4, 3, 40, 64)
    reference = np.stack([np.asarray(Image.fromarray(a).resize((38, 24), Image.BOX).resize((64, 40), Image.BOX))
                          for a in as_hwc(x)]).astype(int)  # fmt: skip
    ours = as_hwc(Shift("pixelate", factor=0.6)(x)).astype(int)  # int(64 * 0.6) = 38, int(40 * 0.6) = 24
    assert np.abs(ours - reference).max() <= 1
