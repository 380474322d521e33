"""``shot_noise`` against ImageNet-C's formula on a real photograph at 224 px and at 32 px: its tables are the
generation scripts', and the change it makes follows ``clip(poisson(x c) / c, 0, 1)`` in distribution, clipping
included. (Determinism, batching and the registry's checks are tests/analysis/shifts/test_shift.py's, for every
kind.)"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from peanchor.analysis.shifts import TABLE_RESOLUTION, Shift, severity_table
from peanchor.core.errors import ConfigError

# shot_noise() in hendrycks/robustness at 8190fe329f5f072a06e3a2aea02bb5dda69aed9f, ImageNet-C/create_c/.
QUOTED = {
    "imagenet-c": [60, 25, 12, 5, 3],  # make_imagenet_c.py, line 257
    "tiny-imagenet-c": [250, 100, 50, 30, 15],  # make_tinyimagenet_c.py, line 256
    "cifar-10-c": [500, 250, 100, 75, 50],  # make_cifar_c.py, line 138
}


@pytest.mark.parametrize("table", QUOTED)
def test_the_severity_table_is_the_generation_scripts(table):
    shifts = severity_table(TABLE_RESOLUTION[table], ["shot_noise"])["shot_noise"]
    assert [s.photons for s in shifts] == QUOTED[table] and {s.seed for s in shifts} == {0}


@pytest.mark.parametrize("size", [224, 32])
def test_the_change_follows_imagenet_c_formula(photos, size):
    x = photos(size)
    pixels = x.numpy().astype(np.float64)  # (B, C, H, W) on the 0..255 scale
    rng = np.random.default_rng(1)
    for c in [*QUOTED["imagenet-c" if size == 224 else "cifar-10-c"], 1000]:
        ours = Shift("shot_noise", photons=c, seed=3)(x).numpy().astype(np.float64)
        # shot_noise() in make_imagenet_c.py: x / 255, clip(poisson(x * c) / c, 0, 1) * 255; rounded here.
        reference = np.round(np.clip(rng.poisson(pixels / 255 * c) / c, 0, 1) * 255)
        unclipped_ours, unclipped_ref = (ours > 0) & (ours < 255), (reference > 0) & (reference < 255)
        ks = scipy.stats.ks_2samp((ours - pixels)[unclipped_ours], (reference - pixels)[unclipped_ref])
        assert ks.pvalue > 1e-3, (c, ks)
        # Exact clipping: the output is 0 when k 255 / c < 0.5 and 255 when k 255 / c >= 254.5, k ~ Poisson(x c / 255).
        rate = pixels / 255 * c
        p_low = scipy.stats.poisson.cdf(np.ceil(0.5 * c / 255) - 1, rate)
        p_high = scipy.stats.poisson.sf(np.ceil(254.5 * c / 255) - 1, rate)
        for count, p in (((ours == 0).sum(), p_low), ((ours == 255).sum(), p_high)):
            assert abs(count - p.sum()) <= 4 * np.sqrt((p * (1 - p)).sum()) + 1, (c, count, p.sum())


def test_fewer_photons_more_noise_and_the_mean_is_kept(photos):
    x = photos(32)
    errors = [(Shift("shot_noise", photons=c)(x).float() - x.float()).abs().mean().item() for c in (500, 100, 20)]
    assert errors[0] < errors[1] < errors[2]
    # Poisson noise is unbiased away from the clipping: mid-grey pixels keep their mean.
    mid = (x > 64) & (x < 192)
    change = Shift("shot_noise", photons=100)(x).float() - x.float()
    assert abs(change[mid].mean().item()) < 0.5


@pytest.mark.parametrize("bad", [0, -3, float("nan"), "60"])
def test_photons_must_be_a_positive_number(bad):
    with pytest.raises(ConfigError, match="shot_noise photons must be"):
        Shift("shot_noise", photons=bad)
