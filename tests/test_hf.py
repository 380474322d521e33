"""Hugging Face datasets for real: a small image-classification DatasetDict built offline (``Dataset.from_dict`` with
an ``Image`` and a ``ClassLabel`` feature, ``save_to_disk``), trained on and analysed through the CLI, with other
column names through ``--set data.image_column=...``, and one clear line for a root that is not a saved dataset."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import numpy as np
import pytest
from PIL import Image

from peanchor.cli import main

CLASSES = ["dark", "mid", "light"]


def save_hf_dataset(root: Path, *, image_column: str = "image", label_column: str = "label", n_train: int = 24,
                    n_val: int = 12, seed: int = 0) -> Path:  # fmt: skip
    """A DatasetDict with 'train' and 'validation': 12 px noise images whose brightness is the class."""
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


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEANCHOR_CACHE", str(tmp_path / "cache"))


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
