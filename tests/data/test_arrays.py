"""peanchor.data.arrays: an array dataset pickles its path, not its pixels, and reads a batch as it reads items."""

from __future__ import annotations

import pickle

import pytest
import torch

from peanchor.data import DataSpec, build_datasets

pytestmark = pytest.mark.usefixtures("private_cache")


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
