"""peanchor.data.imagenet100: the ImageNet-100 subset view of a (fake) ImageNet, its class list, its layouts and its
materialised copy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

import peanchor.data as data
from peanchor.data import DataSpec, build_datasets
from peanchor.core.errors import DataError

from tests.helpers.images import write_jpeg as _write_jpeg

pytestmark = pytest.mark.usefixtures("private_cache")


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
