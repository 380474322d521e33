"""``defocus_blur`` against ImageNet-C's formula on a real photograph at 224 px and at 32 px: its tables are the
generation scripts', and each channel is the photograph correlated with the script's anti-aliased disk, written out
here with numpy and scipy in place of OpenCV. (Determinism, batching and the registry's checks are
tests/analysis/shifts/test_shift.py's, for every kind.)"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage

from peanchor.analysis.shifts import TABLE_RESOLUTION, Shift, severity_table
from peanchor.core.errors import ConfigError

# defocus_blur() in hendrycks/robustness at 8190fe329f5f072a06e3a2aea02bb5dda69aed9f, ImageNet-C/create_c/:
# (radius, alias_blur) per severity.
QUOTED = {
    "imagenet-c": [(3, 0.1), (4, 0.5), (6, 0.5), (8, 0.5), (10, 0.5)],  # make_imagenet_c.py, line 315
    "tiny-imagenet-c": [(0.5, 0.6), (1, 0.1), (1.5, 0.1), (2.5, 0.01), (3, 0.1)],  # make_tinyimagenet_c.py, line 302
    "cifar-10-c": [(0.3, 0.4), (0.4, 0.5), (0.5, 0.6), (1, 0.2), (1.5, 0.1)],  # make_cifar_c.py, line 184
}


def reference_disk(radius: float, alias_blur: float) -> np.ndarray:
    """disk() of the generation scripts: the grid -8..8 (-r..r above 8), the points inside the radius normalised,
    then OpenCV's GaussianBlur with ksize 3 (5 above 8) and sigmaX = alias_blur: a separable kernel
    exp(-(i - (k - 1) / 2)² / (2 σ²)) normalised, borders BORDER_REFLECT_101 (scipy's ``mirror``)."""
    grid = np.arange(-8, 8 + 1) if radius <= 8 else np.arange(-radius, radius + 1)
    ksize = 3 if radius <= 8 else 5
    xx, yy = np.meshgrid(grid, grid)
    aliased = np.array(xx**2 + yy**2 <= radius**2, dtype=np.float64)
    aliased /= aliased.sum()
    taps = np.exp(-((np.arange(ksize) - (ksize - 1) / 2) ** 2) / (2 * alias_blur**2))
    taps /= taps.sum()
    for axis in (0, 1):
        aliased = scipy.ndimage.correlate1d(aliased, taps, axis=axis, mode="mirror")
    return aliased


def reference_defocus(images: np.ndarray, radius: float, alias_blur: float) -> np.ndarray:
    """defocus_blur(): per channel cv2.filter2D(x / 255, -1, disk) (a correlation, BORDER_REFLECT_101), clipped."""
    kernel = reference_disk(radius, alias_blur)
    out = [[scipy.ndimage.correlate(channel / 255, kernel, mode="mirror") for channel in image] for image in images]
    return np.clip(np.array(out), 0, 1) * 255  # (B, C, H, W)


@pytest.mark.parametrize("table", QUOTED)
def test_the_severity_table_is_the_generation_scripts(table):
    shifts = severity_table(TABLE_RESOLUTION[table], ["defocus_blur"])["defocus_blur"]
    assert [(s.radius, s.alias_blur) for s in shifts] == QUOTED[table]


@pytest.mark.parametrize("size", [224, 32])
def test_each_channel_is_the_photograph_convolved_with_imagenet_c_disk(photos, size):
    x = photos(size)
    rows = [*QUOTED["imagenet-c"], (9, 0.5)] if size == 224 else [*QUOTED["cifar-10-c"], *QUOTED["tiny-imagenet-c"],
                                                                  (7.5, 0.3)]  # fmt: skip
    for radius, alias_blur in rows:
        ours = Shift("defocus_blur", radius=radius, alias_blur=alias_blur)(x).numpy()
        reference = reference_defocus(x.numpy().astype(np.float64), radius, alias_blur)
        assert np.abs(ours - reference).max() <= 0.5 + 1e-3, (radius, alias_blur)


def test_alias_blur_defaults_to_the_scripts_and_larger_disks_blur_more(photos):
    x = photos(32)
    assert Shift("defocus_blur", radius=2).alias_blur == 0.1  # disk(radius, alias_blur=0.1)
    errors = [(Shift("defocus_blur", radius=r)(x).float() - x.float()).abs().mean().item() for r in (1, 2, 4)]
    assert errors[0] < errors[1] < errors[2]


def test_small_images_take_small_disks(photos):
    """A disk reaches floor(radius) + 1 px (the alias blur), at most 8 up to a radius of 8, then the radius: that
    must stay inside the image (reflect padding). The grid's all-zero border is no part of it."""
    x = photos(8)
    for radius in (1, 3, 6):
        ours = Shift("defocus_blur", radius=radius)(x).numpy()
        assert np.abs(ours - reference_defocus(x.numpy().astype(np.float64), radius, 0.1)).max() <= 0.5 + 1e-3
    Shift("defocus_blur", radius=8).resolved(9)  # reaches 8 px
    for radius, side in ((7, 8), (8, 8), (9, 9)):
        with pytest.raises(ConfigError, match=f"too large for {side} px images"):
            Shift("defocus_blur", radius=radius).resolved(side)
    with pytest.raises(ConfigError, match="too large for 8 px images"):
        Shift("defocus_blur", radius=7)(x)


def test_a_radius_off_the_grid_is_refused():
    for radius in (0, -1, 8.5, 9.5):
        with pytest.raises(ConfigError, match="radius must be a finite number > 0, and whole above 8"):
            Shift("defocus_blur", radius=radius)
    with pytest.raises(ConfigError, match="alias_blur must be a finite number > 0"):
        Shift("defocus_blur", radius=3, alias_blur=0)
