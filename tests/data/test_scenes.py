"""peanchor.data.scenes: the generated scenes (deterministic, balanced, glyphs where designed), their cache and the
sample grid."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import peanchor.data as data
from peanchor.data import DataSpec, build_datasets, build_eval_dataset, scenes
from peanchor.core.errors import DataError

from tests.helpers.images import read_image as _read

pytestmark = pytest.mark.usefixtures("private_cache")


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
    count = len(scenes.TEXTURES)
    plain = [scenes._texture(np.array(j), x, y) for j in range(count)]
    for i in range(count):
        for dx in range(12):
            for dy in range(12):
                a = scenes._texture(np.array(i), x + dx, y + dy)  # texture i at phase (dx, dy), drawn once
                for j in range(count):
                    same = np.array_equal(a, plain[j]) or np.array_equal(a, 1 - plain[j])
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
