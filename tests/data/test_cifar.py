"""peanchor.data.cifar: CIFAR-10/100 from local pickles (faked here), never downloaded, never running code."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from peanchor.data import DataSpec, build_datasets, build_eval_dataset
from peanchor.core.errors import DataError

pytestmark = pytest.mark.usefixtures("private_cache")


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
