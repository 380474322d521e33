"""Shifts of every registered kind: deterministic, shape-preserving, batching-independent, stronger with severity, their
parameters checked; a :class:`Shift` is a frozen, hashable value whose description rebuilds it. (The kernels against
outside references: tests/analysis/shifts/test_kinds.py and kinds/test_<kind>.py; the registry:
tests/analysis/shifts/test_registry.py.)"""

from __future__ import annotations

import copy
import dataclasses
import pickle

import pytest
import torch

from peanchor.analysis import shifts as C
from peanchor.analysis.corrupted_sets import corrupt
from peanchor.analysis.shifts import Shift, severity_shift, severity_table
from peanchor.core.errors import ConfigError

from tests.helpers.images import textured


def mae(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().mean().item()


def test_default_kernel_size_is_odd_and_capped():
    for sigma in (0.4, 0.7, 1.0, 2.5, 6.0):
        k = C.default_blur_kernel_size(sigma)
        assert k % 2 == 1 and k >= 2 * 3 * sigma  # covers at least ±3σ
    assert C.default_blur_kernel_size(6.0, img_size=32) == 31
    assert C.default_blur_kernel_size(6.0, img_size=33) == 33
    assert C.default_blur_kernel_size(1.0, img_size=1) == C.default_blur_kernel_size(1.0, img_size=2) == 1
    with pytest.raises(ConfigError, match="blur sigma must be > 0, got 0"):
        C.default_blur_kernel_size(0)


def test_blur_kernel_is_capped_to_the_image_or_refused():
    x = textured(2, 16)
    wide = Shift("blur", sigma=6.0)  # skimage's rule asks for 49 × 49; 16 px images take 15 × 15
    assert wide.resolved(16).kernel_size == 15
    assert torch.equal(wide(x), wide.resolved(16)(x))
    Shift("blur", kernel_size=9, sigma=1.0).resolved(5)  # a half-kernel of 4 fits in 5 px
    with pytest.raises(ConfigError, match="blur kernel_size 9 is too large for 4 px images"):
        Shift("blur", kernel_size=9, sigma=1.0).resolved(4)


@pytest.mark.parametrize("kind", C.SHIFT_KINDS)
def test_an_empty_batch_is_returned_empty(kind):
    empty = torch.zeros(0, 3, 32, 32, dtype=torch.uint8)
    out = severity_shift(kind, 3, 32)(empty)
    assert out.shape == empty.shape and out.dtype == torch.uint8 and out is not empty


# ---- the shifts themselves ------------------------------------------------------------------------
@pytest.mark.parametrize("size", [224, 32])
def test_stronger_severity_disrupts_more(photos, size):
    x = photos(size)[:2]
    table = severity_table(size)
    for kind in C.SHIFT_KINDS:
        errors = [mae(s(x), x) for s in table[kind]]
        assert all(0 < a < b for a, b in zip(errors, errors[1:])), (kind, errors)


def test_blur_sigma_monotonic_at_fixed_kernel():
    x = textured(2, 32, seed=3)
    errors = [mae(Shift("blur", kernel_size=7, sigma=s)(x), x) for s in (0.3, 0.6, 1.0, 2.0, 4.0)]
    assert all(a < b for a, b in zip(errors, errors[1:])), errors


@pytest.mark.parametrize(
    "shift",
    [
        *(severity_shift(kind, 3, 32) for kind in C.SHIFT_KINDS),
        Shift("blur", sigma=1.0),
        Shift("gaussian_noise", sigma=0.1, seed=1),
        Shift("shot_noise", photons=30, seed=1),
    ],
    ids=lambda s: s.name,
)
def test_shape_dtype_and_determinism(shift):
    x = textured(3, 32, seed=1)
    before = x.clone()
    y1, y2 = shift(x), shift(x)
    assert y1.shape == x.shape and y1.dtype == torch.uint8
    assert torch.equal(y1, y2)
    assert torch.equal(x, before)  # the input is left alone
    assert not torch.equal(y1, x)
    # the same result image by image: batching never changes the output
    single = torch.cat([shift(x[i : i + 1], start_index=i) for i in range(3)])
    assert torch.equal(single, y1)


@pytest.mark.parametrize("kind,param", [("gaussian_noise", {"sigma": 0.1}), ("shot_noise", {"photons": 30})])
def test_noise_depends_on_seed_and_index_only(kind, param):
    x = textured(4, 16)
    a = Shift(kind, **param, seed=0)
    b = Shift(kind, **param, seed=1)
    assert not torch.equal(a(x), b(x))
    assert not torch.equal(a(x[:1]), a(x[:1], start_index=1))  # each image index has its own noise
    torch.manual_seed(123)  # the global RNG plays no part
    first = a(x)
    torch.manual_seed(456)
    assert torch.equal(first, a(x))
    assert torch.equal(corrupt(x, a, chunk_size=3), first)


def test_identityish_settings():
    x = textured(2, 64, seed=2)
    assert mae(Shift("jpeg", quality=100)(x), x) < 2.0
    assert mae(Shift("jpeg", quality=100)(x), x) < mae(Shift("jpeg", quality=90)(x), x)
    assert torch.equal(Shift("contrast", factor=1.0)(x), x)
    assert torch.equal(Shift("pixelate", factor=1.0)(x), x)
    assert mae(Shift("blur", kernel_size=3, sigma=0.05)(x), x) < 0.01


def test_contrast_is_imagenet_c_per_channel_mean():
    x = textured(2, 16)
    y = Shift("contrast", factor=0.0)(x)
    means = x.float().mean(dim=(-2, -1)).round()  # (B, C)
    assert torch.equal(y.float(), means[..., None, None].expand_as(y))


def test_bad_parameters_are_config_errors():
    with pytest.raises(ConfigError):
        Shift("jpeg", quality=0)
    with pytest.raises(ConfigError):
        Shift("jpeg", quality=50, sigma=1.0)
    with pytest.raises(ConfigError):
        Shift("blur", sigma=1.0, kernel_size=4)
    with pytest.raises(ConfigError):
        Shift("snow", factor=1.0)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Shift.from_dict({"kind": "jpeg", "quality": 5, "colour": 1})
    with pytest.raises(ValueError):
        Shift("jpeg", quality=50)(torch.zeros(1, 3, 8, 8))  # float input


# ---- Shift as a value --------------------------------------------------------------------------------------
STORED = [  # descriptions as result files hold them, and the names derived from them
    ({"kind": "jpeg", "quality": 58}, "jpeg_q58"),
    ({"kind": "blur", "kernel_size": 5, "sigma": 2.5}, "blur_k5_s2.5"),
    ({"kind": "blur", "kernel_size": None, "sigma": 1.0}, "blur_s1"),
    ({"kind": "gaussian_noise", "sigma": 0.08, "seed": 0}, "gaussian_noise_s0.08"),
    ({"kind": "gaussian_noise", "sigma": 0.2, "seed": 3}, "gaussian_noise_s0.2_seed3"),
    ({"kind": "contrast", "factor": 0.4}, "contrast_f0.4"),
    ({"kind": "pixelate", "factor": 0.6}, "pixelate_f0.6"),
    ({"kind": "shot_noise", "photons": 60.0, "seed": 0}, "shot_noise_p60"),
    ({"kind": "defocus_blur", "radius": 3.0, "alias_blur": 0.1}, "defocus_blur_r3"),
    ({"kind": "defocus_blur", "radius": 1.5, "alias_blur": 0.6}, "defocus_blur_r1.5_a0.6"),
    ({"kind": "gaussian_noise", "sigma": 0.1, "seed": 1234567}, "gaussian_noise_s0.1_seed1234567"),  # not 1.23e+06
]


@pytest.mark.parametrize("description,name", STORED, ids=[n for _, n in STORED])
def test_stored_descriptions_rebuild_the_same_shift_and_name(description, name):
    shift = Shift.from_dict(description)
    assert shift.describe() == description and list(shift.describe()) == list(description)
    assert shift.name == name


def test_a_shift_is_a_frozen_hashable_value():
    s = Shift("gaussian_noise", sigma=1)  # an integer σ is stored as a float, and the seed defaults to 0
    assert s == Shift("gaussian_noise", sigma=1.0, seed=0) and hash(s) == hash(Shift("gaussian_noise", sigma=1.0))
    assert s != Shift("gaussian_noise", sigma=1.0, seed=1) and s != "gaussian_noise"
    assert hash(s) != hash(Shift("gaussian_noise", sigma=1.0, seed=1))
    assert len({s, Shift("gaussian_noise", sigma=1.0), Shift("blur", sigma=1.0)}) == 2
    assert repr(s) == "Shift('gaussian_noise', sigma=1.0, seed=0)" and isinstance(s.sigma, float)
    assert pickle.loads(pickle.dumps(s)) == s and copy.deepcopy(s) == s
    assert s.quality is None  # a parameter of another kind
    with pytest.raises(AttributeError, match="'Shift' object has no attribute 'colour'"):
        s.colour  # noqa: B018
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'sigma'"):
        s.sigma = 2.0
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot delete field 'kind'"):
        del s.kind


def test_bad_descriptions_and_parameters_are_config_errors():
    with pytest.raises(ConfigError, match="needs a 'kind' key"):
        Shift.from_dict({"quality": 5})
    with pytest.raises(ConfigError, match=r"unknown shift parameter\(s\) colour, size in "):
        Shift.from_dict({"kind": "jpeg", "quality": 5, "colour": 1, "size": 2})
    with pytest.raises(ConfigError, match="shift 'jpeg' takes quality; got sigma=1.0"):
        Shift("jpeg", quality=50, sigma=1.0)
    with pytest.raises(ConfigError, match="shift 'blur' takes kernel_size, sigma; got quality=5"):
        Shift("blur", sigma=1.0, quality=5)
    assert Shift("jpeg", quality=50, sigma=None) == Shift("jpeg", quality=50)  # "not given", as descriptions write it
    with pytest.raises(ConfigError, match="unknown shift kind 'snow'; expected one of blur, contrast"):
        Shift("snow", factor=1.0)
    for bad in (True, 9.5, "50", None):
        with pytest.raises(ConfigError, match="jpeg quality must be an integer in 1..100"):
            Shift("jpeg", quality=bad)
    for bad in (True, "0.5", float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="contrast factor must be a finite number"):
            Shift("contrast", factor=bad)
    with pytest.raises(ConfigError, match="gaussian_noise seed must be an integer, got 1.5"):
        Shift("gaussian_noise", sigma=0.1, seed=1.5)
