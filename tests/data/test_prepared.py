"""peanchor.data.prepared: ``peanchor data prepare`` round trips to the evaluation pixels, leaves unreadable images
out, refuses what it cannot read, and decodes at a measured rate."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision.transforms import v2

import peanchor.data as data
from peanchor.data import DataSpec, build_datasets, build_eval_dataset
from peanchor.core.errors import DataError

from tests.helpers.images import read_image as _read, all_items as _all, make_folder_tree as _make_folder_tree

pytestmark = pytest.mark.usefixtures("private_cache")


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
