"""Hugging Face datasets for real: a small image-classification DatasetDict built offline (``Dataset.from_dict`` with
an ``Image`` and a ``ClassLabel`` feature, ``save_to_disk``), trained on and analysed through the CLI, with other
column names through ``--set data.image_column=...``, and one clear line for a root that is not a saved dataset."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest
from PIL import Image
from torchvision.transforms import v2

from peanchor.cli import main
from peanchor.data import DataSpec, build_datasets
from peanchor.core.errors import DataError

if TYPE_CHECKING:
    import datasets

CLASSES = ["dark", "mid", "light"]


def save_hf_dataset(root: Path, *, image_column: str = "image", label_column: str = "label", n_train: int = 24,
                    n_val: int = 12, seed: int = 0) -> Path:  # fmt: skip
    """A DatasetDict with 'train' and 'validation': 12 px noise images whose brightness is the class."""
    import datasets  # here, not at the top: a worker that runs none of these tests never imports it

    rng = np.random.default_rng(seed)
    features = datasets.Features({image_column: datasets.Image(), label_column: datasets.ClassLabel(names=CLASSES)})

    def split(n: int) -> datasets.Dataset:
        labels = [i % len(CLASSES) for i in range(n)]
        images = [Image.fromarray(np.clip(rng.normal(50 + 75 * y, 25, (12, 12, 3)), 0, 255).astype(np.uint8))
                  for y in labels]  # fmt: skip
        return datasets.Dataset.from_dict({image_column: images, label_column: labels}, features=features)

    datasets.DatasetDict({"train": split(n_train), "validation": split(n_val)}).save_to_disk(str(root))
    return root


@pytest.fixture(scope="module")
def hf_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Saved with the columns named `img` and `y` (not the defaults image/label)."""
    return save_hf_dataset(tmp_path_factory.mktemp("hf") / "brightness", image_column="img", label_column="y")


pytestmark = pytest.mark.usefixtures("private_cache")


TRAIN = ["train", "--preset", "smoke", "--no-progress", "--data", "hf", "--set", "train.batch_size=8"]
COLUMNS = ["--set", "data.image_column=img", "--set", "data.label_column=y"]


def one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("peanchor: error: "), err
    return err[0]


@pytest.mark.slow
def test_train_and_analyze_from_a_saved_hf_dataset(hf_root, tmp_path, capsys):
    run = tmp_path / "run"
    assert main([*TRAIN, "--data-root", str(hf_root), *COLUMNS, "--out", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["data"], summary["train_images"], summary["val_images"], summary["num_classes"]) == ("hf", 24, 12, 3)
    assert summary["val_acc"] > 1 / 3  # above chance: the images were read, with their labels
    # analyse the run: its config says where the data are and how the columns are called
    assert main(["analyze", str(run), "--no-progress"]) == 0
    analysis = json.loads((run / "analysis" / "analysis.json").read_text())
    assert analysis["num_images"] == 12 and analysis["source"]["data"]["image_column"] == "img"
    assert analysis["fragility"]["jpeg"] == 1 - analysis["acc"]["jpeg"] / analysis["clean_acc"]
    # another saved dataset with the default column names: analyze --set says so
    other = save_hf_dataset(tmp_path / "other", n_val=9, seed=1)
    capsys.readouterr()
    assert main(["analyze", str(run), "--data", "hf", "--data-root", str(other), "--out", str(tmp_path / "a2"),
                 "--no-progress"]) != 0  # fmt: skip
    assert "has no label column 'y' (columns: image, label); set data.label_column" in one_error_line(capsys)
    assert main(["analyze", str(run), "--data", "hf", "--data-root", str(other), "--set", "data.image_column=image",
                 "--set", "data.label_column=label", "--out", str(tmp_path / "a2"), "--no-progress"]) == 0  # fmt: skip
    assert json.loads((tmp_path / "a2" / "analysis.json").read_text())["num_images"] == 9


def test_a_root_that_is_not_a_saved_dataset_is_one_line(tmp_path, capsys):
    (tmp_path / "images").mkdir()
    (tmp_path / "images" / "notes.txt").write_text("not a dataset\n")
    for root in (tmp_path / "images", tmp_path / "missing"):
        out = tmp_path / "run"
        assert main([*TRAIN, "--data-root", str(root), "--out", str(out)]) != 0
        line = one_error_line(capsys)
        assert str(root) in line and "save_to_disk" in line
        assert not out.exists()


def test_wrong_columns_and_splits_name_what_is_there(hf_root, tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*TRAIN, "--data-root", str(hf_root), "--out", str(out)]) != 0  # default column names
    assert "has no label column 'label' (columns: img, y); set data.label_column" in one_error_line(capsys)
    assert main([*TRAIN, "--data-root", str(hf_root), *COLUMNS, "--set", "data.hf_val_split=test", "--out",
                 str(out)]) != 0  # fmt: skip
    assert "has no split 'test' (it has train, validation)" in one_error_line(capsys)
    assert not out.exists()


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
