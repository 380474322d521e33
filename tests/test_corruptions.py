"""Shifts of every registered kind: deterministic, shape-preserving, batching-independent, stronger with severity;
the resolution rule for tables and the paper's shifts; the corrupted-set cache. (The kernels against outside
references: tests/test_shift_references.py and test_shift_<kind>.py; the registry: tests/test_shift_registry.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from peanchor.analysis import shifts as C
from peanchor.analysis.corrupted_sets import CorruptedCache, corrupt
from peanchor.analysis.shifts import Shift, paper_shifts, severity_shift, severity_table, table_name
from peanchor.errors import ConfigError, DataError

TABLE_SIZES = {"imagenet-c": 224, "cifar-10-c": 32, "tiny-imagenet-c": 64}


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


def mae(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().mean().item()


# ---- tables and presets -------------------------------------------------------------------------
@pytest.mark.parametrize("name,size", TABLE_SIZES.items())
def test_severity_table_uses_the_table_for_the_resolution(name, size):
    assert table_name(size) == name
    table = severity_table(size)
    assert list(table) == list(C.SHIFT_KINDS)  # every kind has all three tables (the values: test_shift_references.py)
    assert all(len(v) == 5 and len(set(v)) == 5 for v in table.values())
    assert table == {kind: [severity_shift(kind, level, size) for level in range(1, 6)] for kind in table}
    for s in table["blur"]:
        assert s.kernel_size is not None and s.kernel_size % 2 == 1 and s.kernel_size <= size
    for shifts in table.values():
        for s in shifts:  # every description is JSON-able and rebuilds the same shift
            assert Shift.from_dict(json.loads(json.dumps(s.describe()))) == s


def test_table_thresholds():
    assert [table_name(s) for s in (1, 16, 48, 49, 96, 159, 160, 384)] == [
        "cifar-10-c", "cifar-10-c", "cifar-10-c", "tiny-imagenet-c", "tiny-imagenet-c", "tiny-imagenet-c", "imagenet-c",
        "imagenet-c"
    ]
    for bad in (0, -32, True, 32.0):
        with pytest.raises(ConfigError, match="img_size must be a positive integer"):
            table_name(bad)
    with pytest.raises(ConfigError, match="no severity table for shift kind 'snow'; expected one of blur, contrast, "):
        severity_table(32, ["snow"])


def test_paper_shifts_per_resolution():
    big = paper_shifts(224)
    assert big["jpeg"].describe() == {"kind": "jpeg", "quality": 5}
    assert big["blur"].describe() == {"kind": "blur", "kernel_size": 5, "sigma": 2.5}
    small = paper_shifts(32)
    assert small["jpeg"].quality == 58 and small["blur"].sigma == 0.7
    mid = paper_shifts(64)
    assert mid["jpeg"].quality == 50 and mid["blur"].sigma == 1.0
    for shifts in (small, mid):
        k = shifts["blur"].kernel_size
        assert k is not None and k % 2 == 1
    assert C.paper_shifts_source(224) == "paper"
    assert C.paper_shifts_source(32) == "cifar-10-c severity 3"


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


# ---- the cache ------------------------------------------------------------------------------------
class CountingShift:
    """Wraps a shift and counts how many images it corrupted."""

    def __init__(self, shift: Shift) -> None:
        self.shift, self.calls, self.images = shift, 0, 0

    @property
    def name(self) -> str:
        return self.shift.name

    def describe(self) -> dict:
        return self.shift.describe()

    def __call__(self, images: torch.Tensor, *, start_index: int = 0) -> torch.Tensor:
        self.calls += 1
        self.images += images.shape[0]
        return self.shift(images, start_index=start_index)


def test_cache_in_memory_reuses_the_same_tensor():
    x = textured(5, 16)
    counting = CountingShift(Shift("jpeg", quality=30))
    cache = CorruptedCache(chunk_size=2)
    first = cache.get(x, counting, key="eval")
    assert counting.calls == 3 and counting.images == 5  # chunks of 2
    again = cache.get(x, counting, key="eval")
    assert again is first and counting.calls == 3
    assert torch.equal(first, Shift("jpeg", quality=30)(x))
    # another shift or another set is another entry
    cache.get(x, Shift("jpeg", quality=31), key="eval")
    cache.get(x[:2], counting, key="other")
    assert len(cache) == 3 and counting.calls == 4
    # no key: the content fingerprint stands in
    assert cache.get(x, Shift("blur", sigma=0.5)) is cache.get(x.clone(), Shift("blur", sigma=0.5))


def test_cache_on_disk_is_written_once_and_memory_mapped(tmp_path):
    x = textured(4, 16)
    counting = CountingShift(Shift("gaussian_noise", sigma=0.1))
    first = CorruptedCache(tmp_path, chunk_size=3).get(x, counting, key="scenes/val@16")
    path = CorruptedCache(tmp_path).path_for("scenes/val@16", counting)
    assert path is not None and path.exists() and path.suffix == ".npy"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left behind
    second = CorruptedCache(tmp_path).get(x, counting, key="scenes/val@16")
    assert counting.calls == 2  # the second cache read the file
    assert torch.equal(first, second) and second.dtype == torch.uint8
    assert isinstance(np.load(path, mmap_mode="r"), np.memmap)


def test_cache_refuses_a_key_reused_for_other_data(tmp_path):
    shift = Shift("jpeg", quality=30)
    CorruptedCache(tmp_path).get(textured(4, 16), shift, key="k")
    with pytest.raises(DataError, match="distinct key"):
        CorruptedCache(tmp_path).get(textured(3, 16), shift, key="k")
    cache = CorruptedCache()
    cache.get(textured(4, 16), shift, key="k")
    with pytest.raises(DataError):
        cache.get(textured(2, 16), shift, key="k")
