"""`peanchor analyze`'s inputs, each refused in one clear line or accepted: a device this machine lacks, a weights
file for a run directory, a folder without config.yaml with --data, an image folder with only val/, a class count
that does not match (the same check as `peanchor.analyze`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image

import peanchor
from peanchor.cli import main
from peanchor.data import DataSpec
from peanchor.data.folder import imagefolder_samples
from peanchor.core.errors import ConfigError, DataError

FAST = ["--images", "12", "--no-alpha", "--no-progress", "--shift", "jpeg:quality=10"]


def _folder(root: Path, classes: int, splits=("val",)) -> Path:
    g = torch.Generator().manual_seed(classes)
    for split in splits:
        for c in range(classes):
            (root / split / f"c{c}").mkdir(parents=True)
            for i in range(2):
                pixels = torch.randint(0, 256, (20, 20, 3), dtype=torch.uint8, generator=g).numpy()
                Image.fromarray(pixels).save(root / split / f"c{c}" / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A smoke run (10 classes, 16 px), trained in-process."""
    out = tmp_path_factory.mktemp("cli") / "run"
    assert main(["train", "--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    return out


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("peanchor: error: "), err
    return err.removeprefix("peanchor: error: ")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_this_machine_lacks_is_one_line(run, tmp_path, capsys) -> None:
    assert main(["analyze", str(run), "--device", "cuda", "--out", str(tmp_path / "o"), *FAST]) == 2
    assert _error(capsys) == "--device cuda, but CUDA is not available here; use --device cpu"
    assert not (tmp_path / "o").exists()
    assert main(["train", "--preset", "smoke", "--device", "cuda:1", "--out", str(tmp_path / "t")]) == 2
    assert _error(capsys) == "train.device='cuda:1', but CUDA is not available here; use --device cpu"
    images = torch.zeros(2, 3, 16, 16, dtype=torch.uint8)
    with pytest.raises(ConfigError, match=r"^--device cuda, but CUDA is not available here"):
        peanchor.analyze(peanchor.load_model(run), images, device="cuda", alphas=(), progress=False)
    with pytest.raises(ConfigError, match=r"^--device gpu: expected auto, cpu, cuda, cuda:N or mps$"):
        peanchor.analyze(peanchor.load_model(run), images, device="gpu", alphas=(), progress=False)


def test_a_weights_file_stands_for_its_run_directory(run, tmp_path, capsys) -> None:
    assert main(["analyze", str(run / "model.safetensors"), "--out", str(tmp_path / "file"), *FAST]) == 0
    assert main(["analyze", str(run), "--out", str(tmp_path / "dir"), *FAST]) == 0
    by_file, by_dir = (json.loads((tmp_path / d / "analysis.json").read_text()) for d in ("file", "dir"))
    assert by_file["lenses"] == by_dir["lenses"] and by_file["acc"] == by_dir["acc"]
    assert by_file["source"]["run_dir"] == str(run) and by_file["source"]["condition"] == "none"  # the smoke default
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(run / "model.safetensors", alone / "weights.safetensors")
    capsys.readouterr()
    assert main(["analyze", str(alone / "weights.safetensors"), *FAST]) == 2
    assert _error(capsys) == (f"{alone / 'weights.safetensors'} is a weights file, and {alone} beside it has no "
                              "config.yaml: give a run directory, or say what to evaluate it on with --data NAME (for "
                              "a timm model's weights: --timm NAME --weights FILE)")  # fmt: skip
    assert main(["analyze", str(alone / "weights.safetensors"), "--data", "scenes", "--out", str(tmp_path / "w"),
                 *FAST]) == 0  # fmt: skip
    again = json.loads((tmp_path / "w" / "analysis.json").read_text())
    assert again["source"] == {**again["source"], "kind": "weights", "weights": str(alone / "weights.safetensors")}
    assert again["source"]["data"]["name"] == "scenes" and again["num_images"] == 12


def test_a_folder_without_config_yaml_is_analysed_on_the_data_given(run, tmp_path, capsys) -> None:
    folder = tmp_path / "exported"
    folder.mkdir()
    shutil.copy(run / "model.safetensors", folder / "model.safetensors")
    assert main(["analyze", str(folder), "--data", "scenes", *FAST]) == 0
    assert (folder / "analysis" / "analysis.json").is_file()
    capsys.readouterr()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main(["analyze", str(empty), "--data", "scenes", *FAST]) == 2
    err = _error(capsys)
    assert err == f"{empty} has no config.yaml and no model.safetensors: not a peanchor run directory"
    assert "--data" not in err  # they gave it
    assert main(["analyze", str(empty), *FAST]) == 2
    assert _error(capsys).endswith("(pass --data to say what to evaluate on)")


def test_an_image_folder_with_only_val_is_enough_to_evaluate(run, tmp_path, capsys) -> None:
    root = _folder(tmp_path / "ten", 10)
    classes, train, val = imagefolder_samples(root, train=False)
    assert classes == [f"c{c}" for c in range(10)] and train is None and len(val) == 20
    with pytest.raises(DataError, match="ten/train does not exist"):
        imagefolder_samples(root, train=True)  # training still needs its split
    out = tmp_path / "o"
    assert main(["analyze", str(run), "--data", "imagefolder", "--data-root", str(root), "--out", str(out),
                 "--no-alpha", "--no-progress"]) == 0  # fmt: skip
    assert json.loads((out / "analysis.json").read_text())["num_images"] == 20


def test_a_class_count_mismatch_is_the_same_warning_from_the_cli_and_python(run, tmp_path, capsys) -> None:
    root = _folder(tmp_path / "two", 2)
    out = tmp_path / "o"
    with pytest.warns(UserWarning) as from_cli:  # the CLI prints it as one line: "peanchor: warning: ..."
        assert main(["analyze", str(run), "--data", "imagefolder", "--data-root", str(root), "--out", str(out),
                     *FAST]) == 0  # fmt: skip
    text = ("the model has 10 outputs but the dataset has 2 classes: its accuracy and FS take the dataset's classes "
            "for its first 2 outputs (the geometry does not depend on them)")  # fmt: skip
    assert [str(w.message) for w in from_cli if "outputs" in str(w.message)] == [text]
    with pytest.warns(UserWarning) as caught:
        result = peanchor.analyze(peanchor.load_model(run), DataSpec(name="imagefolder", root=str(root)), alphas=(),
                                  progress=False, shifts=["jpeg:quality=10"])  # fmt: skip
    assert [str(w.message) for w in caught if "outputs" in str(w.message)] == [text] and result.num_images == 4
    big = _folder(tmp_path / "twelve", 12)  # more classes than outputs: labels it can never predict
    assert main(["analyze", str(run), "--data", "imagefolder", "--data-root", str(big), "--out", str(out), *FAST]) == 2
    assert _error(capsys).startswith("the model has 10 outputs but the dataset has 12 classes; accuracy and FS need "
                                     "matching classes (a peanchor model is scored on data with the classes it was "
                                     "trained on)")  # fmt: skip
