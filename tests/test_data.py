"""Tests for peanchor.data: the scenes generator, the real-data loaders and their error messages."""

from __future__ import annotations

import json
import os
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2
from torchvision.transforms.v2 import functional as TF

import peanchor.data as data
from peanchor.data import DataSpec, build_datasets, build_eval_dataset, scenes
from peanchor.data.transforms import batch_augment
from peanchor.errors import ConfigError, DataError


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    """Never touch the user's ~/.cache in tests."""
    monkeypatch.setenv("PEANCHOR_CACHE", str(tmp_path / "cache"))


# Test images are written with Pillow: torchvision's encoders are deprecated from 0.29 on.


def _random_image(h: int, w: int, seed: int) -> Image.Image:
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8))


def _write_jpeg(path: Path, h: int = 12, w: int = 10, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _random_image(h, w, seed).save(path, format="JPEG", quality=90)


def _write_png(path: Path, h: int = 9, w: int = 14, seed: int = 0) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _random_image(h, w, seed).save(path, format="PNG")


def _read(path: Path) -> torch.Tensor:
    with Image.open(path) as img:
        return TF.pil_to_tensor(img.convert("RGB"))


def _all(dataset) -> tuple[torch.Tensor, list[int]]:
    items = [dataset[i] for i in range(len(dataset))]
    return torch.stack([x for x, _ in items]), [y for _, y in items]


# ------------------------------------------------------------------------------------------------
# scenes


def test_scenes_deterministic_and_seeded():
    a_img, a_lab = scenes.generate_scenes(120, seed=0, split="train")
    b_img, b_lab = scenes.generate_scenes(120, seed=0, split="train")
    assert a_img.tobytes() == b_img.tobytes() and np.array_equal(a_lab, b_lab)
    c_img, _ = scenes.generate_scenes(120, seed=1, split="train")
    v_img, _ = scenes.generate_scenes(120, seed=0, split="val")
    assert a_img.tobytes() != c_img.tobytes()
    assert a_img.tobytes() != v_img.tobytes()


def test_scenes_prefix_stable_across_sizes():
    # Chunks are seeded by their index, so whole chunks do not depend on n (or on who asks first).
    big, big_lab = scenes.generate_scenes(scenes.CHUNK + 30)
    small, small_lab = scenes.generate_scenes(scenes.CHUNK)
    assert np.array_equal(big[: scenes.CHUNK], small) and np.array_equal(big_lab[: scenes.CHUNK], small_lab)


def test_scenes_shape_dtype_balance():
    images, labels = scenes.generate_scenes(200, img_size=32)
    assert images.shape == (200, 3, 32, 32) and images.dtype == np.uint8
    assert labels.dtype == np.int64
    assert np.bincount(labels, minlength=10).tolist() == [20] * 10
    assert 20 < images.mean() < 235 and images.std() > 20  # not blank, not saturated
    bigger, _ = scenes.generate_scenes(20, img_size=48)
    assert bigger.shape == (20, 3, 48, 48)


def test_scenes_glyphs_lie_inside_and_wear_their_class_texture_as_designed():
    labels = np.arange(10000) % 10
    for size in (32, 64):
        lay = scenes._layout(np.random.default_rng(0), labels, size)
        # every glyph, its antialiased edge included, lies inside the image with a 1 px margin
        assert lay["box"].min() >= 0.99 and lay["box"].max() <= size - 0.99
        span = (lay["box"][:, 1] - lay["box"][:, 0]).max(axis=1) * 32 / size  # the longer side, at 32 px
        assert span.min() > scenes.GLYPH_SPAN[0] * 0.9 and span.max() < scenes.GLYPH_SPAN[1] * 1.1 + 3  # + the edge ramp and diagonal corners
    own = lay["texture"] == labels
    for c in range(10):
        # the class's own texture with OWN_TEXTURE_P, otherwise any of the ten (its own included, 1 in 10)
        expected = scenes.OWN_TEXTURE_P + (1 - scenes.OWN_TEXTURE_P) / 10
        assert abs(own[labels == c].mean() - expected) < 0.05
        assert set(lay["texture"][labels == c].tolist()) == set(range(len(scenes.TEXTURES)))
    # counterfactual layouts for calibration: all own, or all drawn at random; nothing else changes
    all_own = scenes._layout(np.random.default_rng(0), labels, 32, own_texture_p=1.0)
    at_random = scenes._layout(np.random.default_rng(0), labels, 32, own_texture_p=0.0)
    assert (all_own["texture"] == labels).all() and abs((at_random["texture"] == labels).mean() - 0.1) < 0.02
    for key in ("a", "b", "hw", "box", "colour", "offset"):
        assert np.array_equal(all_own[key], at_random[key])


def test_scenes_counterfactual_splits_differ_only_inside_the_glyph():
    real, labels = scenes.generate_scenes(100, split="val")
    own, own_labels = scenes.generate_scenes(100, split="val", own_texture_p=1.0)
    assert np.array_equal(labels, own_labels)
    rng = np.random.default_rng([scenes.GENERATOR_VERSION, 0, scenes.SPLITS["val"], 32, 0])  # chunk 0's stream
    assert np.array_equal(rng.permutation(np.arange(100) % 10), labels)
    scenes._draw_background(rng, 100)
    lay = scenes._layout(rng, labels, 32)  # the draws in the order _render_chunk makes them
    changed = (real != own).any(axis=1)  # (n, S, S)
    for i in np.flatnonzero(changed.any(axis=(1, 2))):
        ys, xs = np.nonzero(changed[i])
        (x_lo, y_lo), (x_hi, y_hi) = lay["box"][i]
        assert xs.min() >= np.floor(x_lo) and xs.max() <= np.ceil(x_hi)
        assert ys.min() >= np.floor(y_lo) and ys.max() <= np.ceil(y_hi)
    with pytest.raises(DataError, match="own_texture_p"):
        scenes.generate_scenes(10, own_texture_p=1.5)


def test_scenes_textures_are_distinct_at_every_phase():
    # No texture is another one shifted or inverted: a texture names a class, whatever its phase.
    y, x = np.mgrid[0:12, 0:12]
    for i in range(len(scenes.TEXTURES)):
        for j in range(len(scenes.TEXTURES)):
            for dx in range(12):
                for dy in range(12):
                    a = scenes._texture(np.array(i), x + dx, y + dy)
                    b = scenes._texture(np.array(j), x, y)
                    same = np.array_equal(a, b) or np.array_equal(a, 1 - b)
                    assert same == (i == j) or i == j


def test_scenes_glyph_bars():
    # T, L, plus, H, ring, X, U, F, Z, C: bars per glyph; the X's two and the Z's middle bar are diagonal.
    lay = scenes._layout(np.random.default_rng(0), np.arange(10), 32)
    assert [int(lay["active"][c].sum()) for c in range(10)] == [2, 2, 2, 3, 4, 2, 3, 3, 3, 3]
    seg = lay["b"] - lay["a"]  # (10, SLOTS, 2)
    diagonal = (np.abs(seg[..., 0]) > 1) & (np.abs(seg[..., 1]) > 1) & lay["active"]
    assert [np.flatnonzero(d).tolist() for d in diagonal] == [[], [], [], [], [], [0, 1], [], [], [1], []]


def test_scenes_layout_puts_the_sky_above_the_ground():
    # The consistent layout a model without positions can lean on: the top row is bluer than the bottom one.
    images, _ = scenes.generate_scenes(500, split="val")
    top, bottom = images[:, :, 0, :].astype(float).mean(-1), images[:, :, -1, :].astype(float).mean(-1)  # (n, 3)
    sky_bluer = (top[:, 2] - top[:, 0]) > (bottom[:, 2] - bottom[:, 0])
    assert sky_bluer.mean() > 0.95


def test_scenes_build_datasets_and_cache_reuse(tmp_path, monkeypatch):
    spec = DataSpec(train_size=50, val_size=30, cache_dir=str(tmp_path / "c"))
    train, val, info = build_datasets(spec)
    assert (len(train), len(val)) == (50, 30)
    assert info.num_classes == 10 and info.classes == list(data.SCENES_CLASSES) and info.img_size == 32
    image, label = val[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.uint8 and isinstance(label, int)
    files = sorted((tmp_path / "c" / "scenes").iterdir())
    assert len(files) == 4  # images + labels per split
    mtimes = [f.stat().st_mtime_ns for f in files]

    def no_generation(*args, **kwargs):
        raise AssertionError("cache miss")

    monkeypatch.setattr(scenes, "generate_scenes", no_generation)
    train2, val2, _ = build_datasets(spec)
    assert isinstance(val2.images, np.memmap)
    assert torch.equal(val2[0][0], image)
    assert [f.stat().st_mtime_ns for f in files] == mtimes
    # a different parameter is a different entry
    with pytest.raises(AssertionError, match="cache miss"):
        build_datasets(DataSpec(train_size=50, val_size=30, seed=3, cache_dir=str(tmp_path / "c")))


def test_scenes_eval_dataset_skips_train(tmp_path):
    val, info = build_eval_dataset(DataSpec(val_size=20, cache_dir=str(tmp_path)))
    assert len(val) == 20 and info.name == "scenes"
    assert not any("train" in f.name for f in (tmp_path / "scenes").iterdir())


def test_scenes_unwritable_cache_falls_back_to_memory(tmp_path):
    blocker = tmp_path / "not_a_dir"
    blocker.write_text("x")
    with pytest.warns(UserWarning, match="cache not written"):
        _, val, _ = build_datasets(DataSpec(train_size=10, val_size=10, cache_dir=str(blocker)))
    assert len(val) == 10


def test_scenes_default_cache_dir_from_env(tmp_path, monkeypatch):
    monkeypatch.setenv("PEANCHOR_CACHE", str(tmp_path / "env"))
    assert scenes.cache_dir() == tmp_path / "env"
    monkeypatch.delenv("PEANCHOR_CACHE")
    assert scenes.cache_dir() == Path.home() / ".cache" / "peanchor"


def test_save_sample_grid(tmp_path):
    path = data.save_sample_grid(tmp_path / "grid.png", per_class=4)
    image = _read(path)
    assert image.shape[1] > 10 * 32
    assert path.stat().st_size < 200_000


def test_array_dataset_pickles_path_not_pixels(tmp_path):
    _, val, _ = build_datasets(DataSpec(train_size=10, val_size=200, cache_dir=str(tmp_path)))
    blob = pickle.dumps(val)
    assert len(blob) < 10_000
    clone = pickle.loads(blob)
    assert torch.equal(clone[5][0], val[5][0])


def test_getitems_matches_getitem(tmp_path):
    _, val, _ = build_datasets(DataSpec(train_size=10, val_size=10, cache_dir=str(tmp_path)))
    batch = val.__getitems__([3, 1, 3])
    for (image, label), i in zip(batch, [3, 1, 3]):
        assert torch.equal(image, val[i][0]) and label == val[i][1]


# ------------------------------------------------------------------------------------------------
# transforms and normalisation


def test_policy_none_is_the_eval_transform():
    x = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8)
    assert batch_augment(x, "none") is x
    assert isinstance(data.train_transform("none", 16), v2.Resize)
    with pytest.raises(ConfigError, match="rrc_flip"):
        batch_augment(x, "bogus")
    with pytest.raises(ConfigError, match="rrc_flip"):
        data.train_transform("bogus", 16)


# Every augmentation is checked against its definition on many seeded draws, through both paths: the
# per-item v2 pipeline (`train_transform`, image files) and the batched one (`batch_augment`, arrays and
# the training loop's device batches). A statistical check fails a correct augmentation with
# probability ALPHA; the seeds are fixed, so a pass is a pass every time.
ALPHA = 1e-3
DRAWS = 2000


def _augment_batch(policy: str, image: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """``n`` draws of ``policy`` on ``image`` (3, S, S) through :func:`batch_augment`, in batches of 500."""
    g = torch.Generator().manual_seed(seed)
    batch = image.expand(min(n, 500), -1, -1, -1).contiguous()  # (b, 3, S, S)
    return torch.cat([batch_augment(batch[: min(500, n - i)], policy, generator=g) for i in range(0, n, 500)])


def _augment_items(policy: str, image: torch.Tensor, n: int, seed: int = 0, size: int | None = None) -> torch.Tensor:
    """``n`` draws of ``policy`` on ``image`` through the per-item pipeline :func:`train_transform` at ``size``."""
    transform = data.train_transform(policy, size or image.shape[-1])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return torch.stack([transform(image) for _ in range(n)])  # (n, 3, S, S)


AUGMENT_PATHS = {"batch": _augment_batch, "item": _augment_items}


def _shift_table(image: torch.Tensor, pad: int, *, edge: bool, flip: bool) -> dict[bytes, tuple[int, int, bool]]:
    """Every output of RandomCrop(S, padding=pad) (+ a horizontal flip) on ``image`` (3, S, S), written out:
    its bytes → (row offset, column offset, flipped)."""
    s = image.shape[-1]
    mode = "replicate" if edge else "constant"
    padded = torch.nn.functional.pad(image[None].float(), (pad,) * 4, mode=mode)[0].to(torch.uint8)  # (3, S+2p, S+2p)
    table = {}
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            crop = padded[:, dy : dy + s, dx : dx + s]
            for flipped in (False, True) if flip else (False,):
                table[(crop.flip(-1) if flipped else crop).contiguous().numpy().tobytes()] = (dy, dx, flipped)
    assert len(table) == (2 * pad + 1) ** 2 * (1 + flip), "two candidate crops coincide: use a less regular image"
    return table


def _identify(outputs: torch.Tensor, table: dict[bytes, tuple[int, int, bool]]) -> list[tuple[int, int, bool]]:
    keys = [o.contiguous().numpy().tobytes() for o in outputs]
    missing = sum(k not in table for k in keys)
    assert missing == 0, f"{missing} of {len(keys)} outputs are no crop (+ flip) of the input"
    return [table[k] for k in keys]


def _assert_uniform(draws: list, cells: list) -> None:
    from collections import Counter

    from scipy.stats import chisquare

    counts = Counter(draws)
    observed = [counts[c] for c in cells]
    assert sum(observed) == len(draws), f"draws outside the {len(cells)} cells: {set(counts) - set(cells)}"
    p = chisquare(observed).pvalue
    assert p > ALPHA, f"not uniform over the {len(cells)} cells: chi-square p = {p:.2g}, counts {observed}"


def _assert_fair_flips(flipped: np.ndarray) -> None:
    from scipy.stats import binom

    n, k = len(flipped), int(np.sum(flipped))
    low, high = binom.interval(1 - ALPHA, n, 0.5)
    assert low <= k <= high, f"{k} of {n} flipped, outside the binomial {1 - ALPHA} interval [{low:.0f}, {high:.0f}]"


@pytest.mark.parametrize("path", sorted(AUGMENT_PATHS))
@pytest.mark.parametrize("policy", ["flip", "translate", "crop_flip"])
def test_shift_and_flip_policies_draw_every_crop_and_flip_uniformly(policy, path):
    """flip: the image or its mirror, half and half. translate: RandomCrop(S, padding=S/16, edge padding), never
    flipped. crop_flip: RandomCrop(S, padding=S/8, zeros) and a fair flip. Each output is identified exactly among
    the policy's possible outputs, and the draws are uniform over them."""
    s = 16
    image = torch.from_numpy(np.random.default_rng(0).integers(0, 256, (3, s, s), dtype=np.uint8))
    pad = {"flip": 0, "translate": data.transforms.translate_padding(s), "crop_flip": data.transforms.crop_padding(s)}
    table = _shift_table(image, pad[policy], edge=policy == "translate", flip=policy != "translate")
    draws = _identify(AUGMENT_PATHS[path](policy, image, DRAWS), table)
    if pad[policy]:
        offsets = range(2 * pad[policy] + 1)
        _assert_uniform([(dy, dx) for dy, dx, _ in draws], [(dy, dx) for dy in offsets for dx in offsets])
    if policy != "translate":
        _assert_fair_flips(np.array([f for *_, f in draws]))


def test_scenes_train_split_is_translated_by_up_to_s_over_16_and_never_flipped(tmp_path):
    """The scenes train split augments as it is read (`fetch`), with its default policy."""
    train, _, _ = build_datasets(DataSpec(train_size=20, val_size=10, cache_dir=str(tmp_path)))
    assert train.policy == "translate"
    raw = torch.from_numpy(np.array(train.images[:20]))  # (20, 3, 32, 32)
    pad = data.transforms.translate_padding(32)
    tables = [_shift_table(x, pad, edge=True, flip=False) for x in raw]
    draws = []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        for _ in range(30):
            shifted, labels = train.fetch(range(20))
            assert labels.tolist() == train.labels[:20].tolist()
            draws += [_identify(out[None], table)[0][:2] for out, table in zip(shifted, tables)]
    offsets = range(2 * pad + 1)
    _assert_uniform(draws, [(dy, dx) for dy in offsets for dx in offsets])


def test_training_steps_see_their_images_translated_afresh_at_every_step(tmp_path, monkeypatch):
    """The training loop augments each device batch (the smoke preset: scenes, translate): what the model is fed
    is every image of the epoch, each shifted by a fresh uniform draw."""
    from peanchor.presets import resolve_config
    from peanchor.training import step as training_step
    from peanchor.training.loop import train

    fed = []
    normalize = training_step.normalize

    def recording(images, mean, std):  # what TrainingForward feeds the model, before normalisation
        fed.append(images.clone())
        return normalize(images, mean, std)

    monkeypatch.setattr(training_step, "normalize", recording)
    sets = ["data.train_size=64", "data.val_size=10", "train.batch_size=32", "train.epochs=4"]
    config = resolve_config("smoke", {}, [f"data.cache_dir={tmp_path / 'cache'}", *sets])
    train(config, tmp_path / "run", progress=False)
    raw = torch.from_numpy(np.array(build_datasets(config.data)[0].images))  # (64, 3, 16, 16) as stored
    pad = data.transforms.translate_padding(config.data.img_size)
    table = {}
    for i, image in enumerate(raw):
        table.update({k: (i, dy, dx) for k, (dy, dx, _) in _shift_table(image, pad, edge=True, flip=False).items()})
    assert len(table) == len(raw) * (2 * pad + 1) ** 2, "two images have a shift in common"
    assert len(fed) == 4 * 2
    draws = _identify(torch.cat(fed), table)
    for epoch in range(4):  # every image once per epoch
        assert sorted(i for i, _, _ in draws[epoch * 64 : (epoch + 1) * 64]) == list(range(64))
    offsets = range(2 * pad + 1)
    _assert_uniform([(dy, dx) for _, dy, dx in draws], [(dy, dx) for dy in offsets for dx in offsets])


def _ramp_image(size: int, step: int) -> torch.Tensor:
    """uint8 (3, S, S): channel 0 is ``step`` × the column, channel 1 ``step`` × the row. Bilinear and antialiased
    resampling keep a linear ramp linear away from the borders, so a crop's size, place and flip can be read back."""
    ramp = torch.arange(size) * step
    assert ramp.max() <= 255
    return torch.stack([ramp.expand(size, size), ramp[:, None].expand(size, size), torch.zeros(size, size)]).to(
        torch.uint8
    )


def _crop_geometry(out: torch.Tensor, step: int, in_size: int, margin: int = 3) -> dict[str, np.ndarray]:
    """The crops behind ``out`` (n, 3, S, S) of :func:`_ramp_image` (in_size, step), fitted on interior pixels:
    width and height (fractions of the input side), the crop's place along its free range (0: left/top edge,
    1: right/bottom edge) and whether it was flipped."""
    s = out.shape[-1]
    k = torch.arange(margin, s - margin, dtype=torch.float64)  # output pixel centres used in the fit
    design = torch.stack([torch.ones_like(k), k - (s - 1) / 2], 1)  # (K, 2): intercept at the centre, slope
    cols = out[:, 0, :, margin : s - margin].double().mean(1)  # (n, K) the column ramp (constant along rows)
    rows = out[:, 1, margin : s - margin, :].double().mean(2)  # (n, K) the row ramp
    fx = torch.linalg.lstsq(design, cols.T).solution.numpy() / step  # (2, n) input px: centre column, px per out px
    fy = torch.linalg.lstsq(design, rows.T).solution.numpy() / step
    assert (fy[1] > 0).all(), "an image was flipped vertically"
    width, height = np.abs(fx[1]) * s / in_size, fy[1] * s / in_size
    centre_x, centre_y = (fx[0] + 0.5) / in_size, (fy[0] + 0.5) / in_size
    with np.errstate(divide="ignore", invalid="ignore"):
        place_x, place_y = (centre_x - width / 2) / (1 - width), (centre_y - height / 2) / (1 - height)
    return {"width": width, "height": height, "place_x": place_x, "place_y": place_y, "flipped": fx[1] < 0}


def _rrc_reference_cdfs(scale: tuple[float, float], ratio: tuple[float, float]):
    """RandomResizedCrop on a square image, written out: the area a ~ U(scale), the log aspect ratio ρ ~
    U(log ratio), drawn again until the crop fits (√(a e^ρ) ≤ 1 and √(a / e^ρ) ≤ 1, i.e. |ρ| ≤ -log a). The kept
    pairs are uniform on that region, so a's density is the length of its ρ interval and vice versa.
    Returns the CDFs of the area and of the log ratio."""
    from scipy.integrate import cumulative_trapezoid

    lo, hi = np.log(ratio[0]), np.log(ratio[1])
    a = np.linspace(*scale, 20001)
    rho = np.linspace(lo, hi, 20001)
    dens_a = np.clip(np.minimum(hi, -np.log(a)) - np.maximum(lo, np.log(a)), 0, None)
    dens_rho = np.clip(np.minimum(scale[1], np.exp(-np.abs(rho))) - scale[0], 0, None)

    def cdf(x: np.ndarray, density: np.ndarray):
        c = cumulative_trapezoid(density, x, initial=0)
        return lambda v: np.interp(v, x, c / c[-1])

    return cdf(a, dens_a), cdf(rho, dens_rho)


# per-item: a 256 px image cropped and resized to 32 px (antialiased); batch: 64 px images, resampled in place
RRC_SETUPS = {"item": (256, 1, 32), "batch": (64, 4, 64)}  # input size, ramp step, output size


@pytest.mark.parametrize("path", sorted(AUGMENT_PATHS))
def test_random_resized_crop_draws_area_ratio_place_and_flip_as_configured(path):
    from scipy.stats import kstest

    in_size, step, out_size = RRC_SETUPS[path]
    image = _ramp_image(in_size, step)
    if path == "item":
        out = _augment_items("rrc_flip", image, DRAWS, size=out_size)
    else:
        out = _augment_batch("rrc_flip", image, DRAWS)
    g = _crop_geometry(out, step, in_size)
    area, log_ratio = g["width"] * g["height"], np.log(g["width"] / g["height"])
    scale, ratio = data.transforms.RRC_SCALE, data.transforms.RRC_RATIO
    slack = 0.02  # the per-item crop is whole pixels of a 256 px image
    assert scale[0] - slack <= area.min() and area.max() <= scale[1] + slack, (area.min(), area.max())
    assert np.log(ratio[0]) - slack <= log_ratio.min() and log_ratio.max() <= np.log(ratio[1]) + slack
    assert (g["width"] <= 1 + slack).all() and (g["height"] <= 1 + slack).all()
    area_cdf, log_ratio_cdf = _rrc_reference_cdfs(scale, ratio)
    for name, values, cdf in (("area", area, area_cdf), ("log ratio", log_ratio, log_ratio_cdf)):
        p = kstest(values, cdf).pvalue
        assert p > ALPHA, f"the crops' {name} does not follow RandomResizedCrop's: KS p = {p:.2g}"
    for axis in ("x", "y"):  # the crop's place is uniform over where it fits
        free = (g["width"] if axis == "x" else g["height"]) < 0.95
        p = kstest(np.clip(g[f"place_{axis}"][free], 0, 1), "uniform").pvalue
        assert p > ALPHA, f"the crops' {axis} place is not uniform: KS p = {p:.2g}"
    _assert_fair_flips(g["flipped"])


def test_image_files_are_cropped_and_flipped_per_item_in_the_train_split_only(tmp_path):
    """An image folder's train split applies the per-item rrc_flip to every read; its val split is the plain resize."""
    from scipy.stats import kstest

    in_size, step, out_size = RRC_SETUPS["item"]
    for split in ("train", "val"):
        (tmp_path / split / "ramp").mkdir(parents=True)
        Image.fromarray(_ramp_image(in_size, step).permute(1, 2, 0).numpy()).save(tmp_path / split / "ramp" / "0.png")
    spec = DataSpec(name="imagefolder", root=str(tmp_path), img_size=out_size, augment="rrc_flip")
    train, val, _ = build_datasets(spec)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        g = _crop_geometry(torch.stack([train[0][0] for _ in range(500)]), step, in_size)
    p = kstest(g["width"] * g["height"], _rrc_reference_cdfs(data.transforms.RRC_SCALE, data.transforms.RRC_RATIO)[0])
    assert p.pvalue > ALPHA, f"the train split's crops do not follow RandomResizedCrop's area: KS p = {p.pvalue:.2g}"
    _assert_fair_flips(g["flipped"])
    plain = _crop_geometry(torch.stack([val[0][0] for _ in range(3)]), step, in_size)
    assert np.allclose(plain["width"], 1, atol=0.01) and np.allclose(plain["height"], 1, atol=0.01)
    assert not plain["flipped"].any()


@pytest.mark.parametrize("path", sorted(AUGMENT_PATHS))
def test_random_resized_crop_falls_back_to_the_centre_crop_of_the_nearest_ratio(path, monkeypatch):
    """When no (area, ratio) draw fits, RandomResizedCrop takes the whole image, cut to the nearest allowed ratio,
    in the centre: here ratio 2 (twice as wide as high) from a square image."""
    monkeypatch.setattr(data.transforms, "RRC_SCALE", (0.9, 1.0))
    monkeypatch.setattr(data.transforms, "RRC_RATIO", (2.0, 3.0))
    in_size, step, out_size = RRC_SETUPS[path]
    image = _ramp_image(in_size, step)
    if path == "item":
        out = _augment_items("rrc_flip", image, 200, size=out_size)
    else:
        out = _augment_batch("rrc_flip", image, 200)
    g = _crop_geometry(out, step, in_size)
    assert np.allclose(g["width"], 1, atol=0.01) and np.allclose(g["height"], 0.5, atol=0.01)
    assert np.allclose(g["place_y"], 0.5, atol=0.02)
    _assert_fair_flips(g["flipped"])


def test_resolve_augment_defaults():
    assert data.resolve_augment("scenes", "auto", 32) == "translate"
    assert data.resolve_augment("cifar10", "auto", 32) == "crop_flip"
    assert data.resolve_augment("imagenet100", "auto", 224) == "rrc_flip"
    assert data.resolve_augment("imagefolder", "auto", 224) == "rrc_flip"
    assert data.resolve_augment("imagefolder", "auto", 32) == "crop_flip"
    assert data.resolve_augment("scenes", "none", 32) == "none"


def test_normalize():
    x = torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2).expand(1, 3, 1, 2)
    out = data.normalize(x, data.IMAGENET_MEAN, data.IMAGENET_STD)
    assert out.dtype == torch.float32 and out.shape == (1, 3, 1, 2)
    expected = (torch.tensor([0.0, 1.0]) - torch.tensor(data.IMAGENET_MEAN)[:, None]) / torch.tensor(data.IMAGENET_STD)[
        :, None
    ]
    assert torch.allclose(out[0, :, 0], expected)
    with pytest.raises(ValueError):
        data.normalize(x.float(), data.IMAGENET_MEAN, data.IMAGENET_STD)


# ------------------------------------------------------------------------------------------------
# registry and spec


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown dataset 'nope'.*scenes.*imagefolder.*cifar10.*prepared"):
        build_datasets(DataSpec(name="nope"))


def test_spec_from_dict_and_validation():
    spec = DataSpec.from_dict({"name": "cifar10", "root": "/x", "img_size": 64})
    assert spec.to_dict()["img_size"] == 64 and DataSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="unknown data key.*colour.*valid keys"):
        DataSpec.from_dict({"colour": 1})
    with pytest.raises(ConfigError, match="img_size"):
        DataSpec(img_size=0).validate()
    with pytest.raises(ConfigError, match="augment"):
        DataSpec(augment="heavy").validate()


# ------------------------------------------------------------------------------------------------
# imagefolder


def _make_folder_tree(root: Path, classes=("cat", "dog", "eel"), n_train=3, n_val=2) -> None:
    seed = 0
    for split, n in (("train", n_train), ("val", n_val)):
        for c in classes:
            for i in range(n):
                seed += 1
                if i % 2:
                    _write_png(root / split / c / f"{i}.png", seed=seed)
                else:
                    _write_jpeg(root / split / c / f"{i}.JPG", h=10 + i, w=13, seed=seed)


def test_imagefolder_builds(tmp_path):
    _make_folder_tree(tmp_path)
    spec = DataSpec(name="imagefolder", root=str(tmp_path), img_size=16)
    train, val, info = build_datasets(spec)
    assert info.classes == ["cat", "dog", "eel"] and info.num_classes == 3 and info.name == "imagefolder"
    assert (len(train), len(val)) == (9, 6)
    images, labels = _all(val)
    assert images.shape == (6, 3, 16, 16) and images.dtype == torch.uint8
    assert labels == [0, 0, 1, 1, 2, 2]
    # eval preprocessing is exactly Resize((S, S)) of the decoded file
    first = _read(tmp_path / "val" / "cat" / "0.JPG")
    assert torch.equal(images[0], v2.Resize((16, 16), antialias=True)(first))
    x, y = train[4]
    assert x.shape == (3, 16, 16) and y == 1


def test_imagefolder_subset(tmp_path):
    _make_folder_tree(tmp_path)
    train, val, _ = build_datasets(
        DataSpec(name="imagefolder", root=str(tmp_path), img_size=16, train_size=4, val_size=2)
    )
    assert (len(train), len(val)) == (4, 2)
    with pytest.raises(DataError, match="train_size=99 but the split holds only 9"):
        build_datasets(DataSpec(name="imagefolder", root=str(tmp_path), img_size=16, train_size=99))


def test_imagefolder_errors(tmp_path):
    spec = DataSpec(name="imagefolder", root=str(tmp_path / "missing"), img_size=16)
    with pytest.raises(DataError, match=r"missing does not exist.*train/<class>/<image>"):
        build_datasets(spec)
    with pytest.raises(DataError, match="needs data.root"):
        build_datasets(DataSpec(name="imagefolder"))

    root = tmp_path / "d"
    _make_folder_tree(root)
    ok = DataSpec(name="imagefolder", root=str(root), img_size=16)
    (root / "train" / "fox").mkdir()
    (root / "val" / "fox").mkdir()
    (root / "train" / "fox" / "notes.txt").write_text("not an image")
    with pytest.raises(DataError, match=r"train/fox holds no images"):
        build_datasets(ok)
    _write_jpeg(root / "train" / "fox" / "a.jpg")
    with pytest.raises(DataError, match=r"val/fox holds no images"):
        build_datasets(ok)
    _write_jpeg(root / "val" / "fox" / "a.jpg")
    (root / "val" / "gnu").mkdir()
    with pytest.raises(DataError, match=r"same class folders.*not in train: gnu"):
        build_datasets(ok)
    (root / "val" / "gnu").rmdir()
    build_datasets(ok)
    os.rename(root / "val", root / "validation")
    with pytest.raises(DataError, match=r"d/val does not exist"):
        build_datasets(ok)

    empty = tmp_path / "e"
    (empty / "train").mkdir(parents=True)
    (empty / "val").mkdir()
    with pytest.raises(DataError, match="has no class folders"):
        build_datasets(DataSpec(name="imagefolder", root=str(empty)))


def test_corrupt_image_is_skipped_with_one_warning(tmp_path):
    _make_folder_tree(tmp_path, classes=("a", "b"), n_train=2, n_val=2)
    bad = tmp_path / "train" / "a" / "0.JPG"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not a jpeg at all")
    train, _, _ = build_datasets(DataSpec(name="imagefolder", root=str(tmp_path), img_size=8, augment="none"))
    bad_index = [str(p) for p, _ in train.samples].index(str(bad))
    with pytest.warns(UserWarning, match=r"skipping unreadable image .*a/0\.JPG"):
        image, label = train[bad_index]
    assert torch.equal(image, train[bad_index + 1][0]) and label == train.samples[bad_index + 1][1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train[bad_index]  # known bad: skipped silently
    # a DataLoader over the whole split does not crash
    loader = torch.utils.data.DataLoader(train, batch_size=4)
    assert sum(len(x) for x, _ in loader) == len(train)


def test_all_images_corrupt_is_a_data_error(tmp_path):
    for split in ("train", "val"):
        (tmp_path / split / "a").mkdir(parents=True)
        (tmp_path / split / "a" / "x.png").write_bytes(b"garbage")
    _, val, _ = build_datasets(DataSpec(name="imagefolder", root=str(tmp_path), img_size=8))
    with pytest.warns(UserWarning), pytest.raises(DataError, match="could be decoded"):
        val[0]


# ------------------------------------------------------------------------------------------------
# CIFAR


def _write_cifar10(root: Path, per_batch: int = 4) -> None:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for name in names:
        batch = {
            "batch_label": name,
            "data": rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8),
            "labels": rng.integers(0, 10, per_batch).tolist(),
            "filenames": [f"{i}.png" for i in range(per_batch)],
        }
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": [f"class{i}" for i in range(10)], "num_vis": 3072}, f, protocol=2)


def test_cifar10_fake(tmp_path):
    _write_cifar10(tmp_path)
    train, val, info = build_datasets(DataSpec(name="cifar10", root=str(tmp_path)))
    assert (len(train), len(val)) == (20, 4) and info.classes[3] == "class3" and info.num_classes == 10
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "rb") as f:
        raw = pickle.load(f)
    image, label = val[2]
    assert torch.equal(image, torch.from_numpy(raw["data"][2].reshape(3, 32, 32))) and label == raw["labels"][2]
    assert train.policy == "crop_flip"
    # other resolutions are resized (eval: Resize((S, S)))
    val64, _ = build_eval_dataset(DataSpec(name="cifar10", root=str(tmp_path / "cifar-10-batches-py"), img_size=64))
    assert val64[0][0].shape == (3, 64, 64)


def test_cifar100_fake(tmp_path):
    folder = tmp_path / "cifar-100-python"
    folder.mkdir()
    rng = np.random.default_rng(1)
    for name, n in (("train", 6), ("test", 3)):
        with open(folder / name, "wb") as f:
            pickle.dump(
                {
                    "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                    "fine_labels": [0, 99, 5, 1, 2, 3][:n],
                    "coarse_labels": [0] * n,
                },
                f,
            )
    with open(folder / "meta", "wb") as f:
        pickle.dump({"fine_label_names": [f"c{i}" for i in range(100)], "coarse_label_names": ["x"]}, f)
    train, val, info = build_datasets(DataSpec(name="cifar100", root=str(tmp_path)))
    assert (len(train), len(val), info.num_classes) == (6, 3, 100)


def test_cifar_missing_says_where_and_never_downloads(tmp_path):
    with pytest.raises(DataError, match=r"cifar-10-batches-py.*never downloads"):
        build_datasets(DataSpec(name="cifar10", root=str(tmp_path)))
    with pytest.raises(DataError, match=r"needs data.root.*cifar-100-python"):
        build_datasets(DataSpec(name="cifar100"))


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_cifar_refuses_code_in_pickles(tmp_path):
    _write_cifar10(tmp_path)
    with open(tmp_path / "cifar-10-batches-py" / "test_batch", "wb") as f:
        pickle.dump({"data": _Evil(), "labels": [0]}, f)
    with pytest.raises(DataError, match="refusing to load"):
        build_eval_dataset(DataSpec(name="cifar10", root=str(tmp_path)))


# ------------------------------------------------------------------------------------------------
# ImageNet-100


def _wnids(n: int, seed: int = 0) -> list[str]:
    """``n`` distinct WordNet-style ids (``n0`` and 7 digits, n01000000 to n08999999), in a scrambled order."""
    wnids = [f"n0{x:07d}" for x in np.random.default_rng(seed).choice(np.arange(10**6, 9 * 10**6), n, replace=False)]
    assert wnids != sorted(wnids)
    return wnids


@pytest.fixture(scope="module")
def class_list(tmp_path_factory) -> Path:
    """An ImageNet-100 class list: 100 ids, not in alphabetical order (like the standard CMC list)."""
    path = tmp_path_factory.mktemp("classes") / "imagenet100_classes.txt"
    path.write_text("# an ImageNet-100 list\n" + "\n".join(_wnids(100)) + "\n")
    return path


@pytest.fixture(scope="module")
def fake_imagenet(tmp_path_factory, class_list):
    """A full-ImageNet-shaped tree: the 100 listed wnids plus 3 extra classes, 1-2 tiny JPEGs each."""
    root = tmp_path_factory.mktemp("imagenet")
    wnids = data.read_class_list(class_list)
    extra = ["n00000001", "n00000002", "n00000003"]
    for k, wnid in enumerate(wnids + extra):
        for split in ("train", "val"):
            for i in range(1 + (k + (split == "val")) % 2):
                _write_jpeg(root / split / wnid / f"{wnid}_{i}.JPEG", h=8, w=8, seed=k * 4 + i)
    return root, wnids


def test_imagenet100_subset_view_numbers_classes_by_sorted_wnid(fake_imagenet, class_list):
    root, wnids = fake_imagenet
    spec = DataSpec(name="imagenet100", root=str(root), class_list=str(class_list), img_size=16)
    train, val, info = build_datasets(spec)
    assert wnids != sorted(wnids)  # the list is not alphabetical ...
    assert info.classes == sorted(wnids) and info.num_classes == 100  # ... but the labels are, as ImageFolder's
    for path, label in train.samples + val.samples:
        assert Path(path).parent.name == info.classes[label]
    assert "n00000001" not in {Path(p).parent.name for p, _ in train.samples}
    assert train[0][0].shape == (3, 16, 16)
    assert train.transform is not None and val[0][0].shape == (3, 16, 16)


def test_imagenet100_both_layouts_give_a_file_the_same_label(tmp_path):
    """The subset view of a full ImageNet (an unsorted class list) and the folder `data imagenet100` makes from it
    label every file alike, so a checkpoint trained on one is scored correctly on the other."""
    wnids = _wnids(100, seed=1)
    full = tmp_path / "imagenet"
    for k, wnid in enumerate([*wnids, "n09999999"]):  # and one class the list leaves out
        for split in ("train", "val"):
            _write_jpeg(full / split / wnid / f"{wnid}_{split}.JPEG", h=8, w=8, seed=k)
    class_list = tmp_path / "imagenet100.txt"
    class_list.write_text("\n".join(wnids) + "\n")
    from peanchor.cli import main

    view = DataSpec(name="imagenet100", root=str(full), class_list=str(class_list), img_size=8)
    folder = tmp_path / "in100"
    argv = ["data", "imagenet100", "--imagenet-root", str(full), "--class-list", str(class_list), "--out", str(folder)]
    assert main(argv) == 0
    copy = DataSpec(name="imagenet100", root=str(folder), img_size=8)

    def labels(spec: DataSpec) -> tuple[list[str], dict[str, int]]:
        train, val, info = build_datasets(spec)
        return info.classes, {Path(p).name: y for p, y in train.samples + val.samples}

    (view_classes, view_labels), (copy_classes, copy_labels) = labels(view), labels(copy)
    assert view_classes == copy_classes == sorted(wnids)
    assert view_labels == copy_labels and len(view_labels) == 200
    assert view_labels[f"{wnids[0]}_val.JPEG"] == sorted(wnids).index(wnids[0])
    # a model trained on the view scores the same on the materialised folder
    run = tmp_path / "run"
    assert main(["train", "--preset", "smoke", "--data", "imagenet100", "--data-root", str(full), "--class-list",
                 str(class_list), "--img-size", "8", "--epochs", "3", "--set", "train.batch_size=20", "--no-progress",
                 "--out", str(run)]) == 0  # fmt: skip
    analyses = []
    for extra in ([], ["--data-root", str(folder), "--set", "data.class_list=null"]):
        out = tmp_path / f"analysis{len(analyses)}"
        assert main(["analyze", str(run), "--no-alpha", "--no-progress", "--out", str(out), *extra]) == 0
        analyses.append(json.loads((out / "analysis.json").read_text()))
    assert analyses[1]["source"]["data"]["class_list"] is None
    assert analyses[0]["clean_acc"] == analyses[1]["clean_acc"] > 0


def test_imagenet100_full_root_needs_class_list(fake_imagenet):
    root, _ = fake_imagenet
    with pytest.raises(DataError, match=r"has 103 class folders, imagenet100 expects 100.*class_list"):
        build_datasets(DataSpec(name="imagenet100", root=str(root), img_size=16))


def test_imagenet100_missing_wnid(fake_imagenet, tmp_path):
    root, wnids = fake_imagenet
    short = tmp_path / "list.txt"
    short.write_text("\n".join(wnids[:3] + ["n09999999", "n09999998"]) + "\n")
    with pytest.raises(
        DataError, match=r"2 of the 5 classes in .*list\.txt are missing from .*train: n09999999, n09999998"
    ):
        build_datasets(DataSpec(name="imagenet100", root=str(root), class_list=str(short), img_size=16))


def test_class_list_errors(tmp_path):
    bad = tmp_path / "bad.txt"
    bad.write_text("# comment\nn01234567 extra column ok\n\nfoo\n")
    with pytest.raises(DataError, match=r"bad\.txt:4: 'foo' is not a WordNet id"):
        data.read_class_list(bad)
    bad.write_text("n01234567\nn01234567\n")
    with pytest.raises(DataError, match="repeats n01234567"):
        data.read_class_list(bad)
    with pytest.raises(DataError, match="does not exist"):
        data.read_class_list(tmp_path / "none.txt")
    bad.write_text("# nothing\n")
    with pytest.raises(DataError, match="holds no WordNet ids"):
        data.read_class_list(bad)


def test_materialize_imagenet100(fake_imagenet, class_list, tmp_path):
    root, wnids = fake_imagenet
    out = data.materialize_imagenet100(root, class_list, tmp_path / "in100")
    for split in ("train", "val"):
        links = sorted((out / split).iterdir())
        assert len(links) == 100 and all(p.is_symlink() for p in links)
        assert Path(os.readlink(out / split / wnids[0])) == (root / split / wnids[0]).resolve()
    assert data.materialize_imagenet100(root, class_list, out) == out  # idempotent
    # the materialised root is layout (a): 100 classes, sorted
    train, val, info = build_datasets(DataSpec(name="imagenet100", root=str(out), img_size=16))
    assert info.classes == sorted(wnids) and len(val) == sum(len(list((root / "val" / w).iterdir())) for w in wnids)
    # refuse to overwrite something else
    other = tmp_path / "other"
    (other / "val" / wnids[5]).mkdir(parents=True)
    with pytest.raises(DataError, match=rf"{wnids[5]} already exists and is not a link.*refusing to overwrite"):
        data.materialize_imagenet100(root, class_list, other)
    assert not (other / "train").exists()  # nothing was made before the conflict was found


# ------------------------------------------------------------------------------------------------
# prepared arrays


def test_prepared_round_trip_equals_eval_pixels(tmp_path):
    src = tmp_path / "src"
    _make_folder_tree(src)
    spec = DataSpec(name="imagefolder", root=str(src), img_size=16)
    out = data.prepare_dataset(spec, tmp_path / "prep", 16)
    assert {p.name for p in out.iterdir()} == {
        "train.npy",
        "train_labels.npy",
        "val.npy",
        "val_labels.npy",
        "meta.json",
    }
    ptrain, pval, pinfo = build_datasets(DataSpec(name="prepared", root=str(out), img_size=16))
    val, info = build_eval_dataset(spec)
    assert pinfo.classes == info.classes and pinfo.mean == info.mean and pinfo.name == "imagefolder"
    got, got_labels = _all(pval)
    want, want_labels = _all(val)
    assert torch.equal(got, want) and got_labels == want_labels
    # the train split is stored with the eval resize too, in file order; augmentation comes later
    plain_train, _, _ = build_datasets(DataSpec(name="imagefolder", root=str(src), img_size=16, augment="none"))
    assert torch.equal(torch.from_numpy(np.array(ptrain.images)), _all(plain_train)[0])
    assert ptrain.policy == "crop_flip" and isinstance(ptrain.images, np.memmap)
    x, _ = ptrain.fetch([0, 1, 2])
    assert x.shape == (3, 3, 16, 16)
    # same request again: reused; a different one into the same folder: refused
    assert data.prepare_dataset(spec, out, 16) == out
    with pytest.raises(DataError, match="already holds a prepared dataset"):
        data.prepare_dataset(spec, out, 24)


def test_data_prepare_leaves_an_unreadable_image_out_and_names_it(tmp_path, capsys):
    """`data prepare` stores each readable image once (never the next one again in place of a bad file), and
    counts and names what it skipped: on the terminal, in a warning, and in meta.json."""
    from peanchor.cli import main

    src = tmp_path / "src"
    _make_folder_tree(src)
    bad = src / "train" / "dog" / "1.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    out = tmp_path / "prep"
    argv = ["data", "prepare", "--data", "imagefolder", "--data-root", str(src), "--img-size", "16", "--out", str(out)]
    with pytest.warns(UserWarning, match=r"skipping unreadable image .*dog/1\.png"):
        assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "8 train, 6 val images" in printed and "skipped 1 unreadable image" in printed and str(bad) in printed
    meta = json.loads((out / "meta.json").read_text())
    assert meta["counts"] == {"train": 8, "val": 6} and meta["skipped"] == {"train": [str(bad)], "val": []}
    ptrain, _, _ = build_datasets(DataSpec(name="prepared", root=str(out), img_size=16))
    stored = torch.from_numpy(np.array(ptrain.images))  # (8, 3, 16, 16)
    assert len({bytes(x.numpy().tobytes()) for x in stored}) == 8  # no image stored twice
    good = [f for f, _ in build_datasets(DataSpec(name="imagefolder", root=str(src), img_size=16))[0].samples
            if Path(f) != bad]  # fmt: skip
    want = torch.stack([v2.Resize((16, 16), antialias=True)(_read(Path(f))) for f in good])
    assert torch.equal(stored, want) and ptrain.labels.tolist() == [0, 0, 0, 1, 1, 2, 2, 2]


def test_prepared_errors(tmp_path):
    with pytest.raises(DataError, match=r"meta\.json is missing.*peanchor data prepare"):
        build_datasets(DataSpec(name="prepared", root=str(tmp_path)))
    out = data.prepare_dataset(DataSpec(train_size=20, val_size=10, cache_dir=str(tmp_path / "c")), tmp_path / "p")
    with pytest.raises(DataError, match=r"prepared at 32 px but data.img_size is 64"):
        build_datasets(DataSpec(name="prepared", root=str(out), img_size=64))
    train, val, info = build_datasets(DataSpec(name="prepared", root=str(out)))
    assert info.name == "scenes" and train.policy == "translate" and len(val) == 10


def test_decode_throughput(tmp_path):
    stats = data.decode_throughput(DataSpec(train_size=64, val_size=10, cache_dir=str(tmp_path)), n=64, batch_size=32)
    assert stats["images"] == 64 and stats["images_per_s"] > 0


# ------------------------------------------------------------------------------------------------
# Hugging Face


def test_hf_missing_package_hint(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "datasets", None)
    with pytest.raises(DataError, match=r"pip install 'peanchor\[hf\]'"):
        build_datasets(DataSpec(name="hf", root="/nowhere"))


def test_hf_rows_adapter_without_datasets():
    """The row adapter works on anything indexable that yields dicts (no `datasets` needed)."""
    import io

    from peanchor.data.hf import HFImageDataset

    png = io.BytesIO()
    Image.new("RGB", (5, 7), (10, 20, 30)).save(png, format="PNG")
    rows = [
        {"image": Image.new("L", (9, 6), 128), "label": 1},
        {"image": {"bytes": b"not an image", "path": None}, "label": 0},
        {"image": {"bytes": png.getvalue(), "path": None}, "label": 2},
        {"image": np.zeros((4, 4, 3), dtype=np.uint8), "label": 0},
    ]
    dataset = HFImageDataset(rows, "image", "label", v2.Resize((8, 8), antialias=True))
    image, label = dataset[0]
    assert image.shape == (3, 8, 8) and label == 1 and (image == 128).all()
    with pytest.warns(UserWarning, match="HF row 1"):
        image, label = dataset[1]
    assert label == 2 and image[:, 0, 0].tolist() == [10, 20, 30]
    assert dataset[3][0].shape == (3, 8, 8)


def test_hf_save_to_disk(tmp_path):
    import datasets

    def split(n):
        return datasets.Dataset.from_dict(
            {
                "image": [Image.new("RGB", (10, 12), (i * 20, 0, 0)) for i in range(n)],
                "label": [i % 3 for i in range(n)],
            },
            features=datasets.Features(
                {"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b", "c"])}
            ),
        )

    datasets.DatasetDict({"train": split(6), "validation": split(3)}).save_to_disk(str(tmp_path / "hfds"))
    train, val, info = build_datasets(DataSpec(name="hf", root=str(tmp_path / "hfds"), img_size=16))
    assert info.classes == ["a", "b", "c"] and (len(train), len(val)) == (6, 3)
    image, label = val[2]
    assert image.shape == (3, 16, 16) and label == 2 and image[0, 0, 0] == 40
    with pytest.raises(DataError, match="no split 'test'"):
        build_datasets(DataSpec(name="hf", root=str(tmp_path / "hfds"), hf_val_split="test"))
