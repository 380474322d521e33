"""Presets resolve the same way for every command: a dataset named on the command line is used whole (the preset's
scenes sizes do not leak into it), and only an explicit ``--set data.train_size=N`` / ``data.val_size=N`` subsamples.
Tested through the CLI (``train``, ``reproduce``, ``analyze``) on a small generated ImageFolder."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

from peanchor.cli import main
from peanchor.presets.catalog import PRESETS, resolve_config

N_TRAIN, N_VAL, CLASSES = 8, 4, ("a", "b", "c")  # per class: 24 train and 12 val images in all


def make_image_folder(root: Path, n_train: int = N_TRAIN, n_val: int = N_VAL, size: int = 12) -> Path:
    """``root/{train,val}/<class>/<i>.png``: random noise with a class-dependent mean, so a model can learn it."""
    rng = np.random.default_rng(0)
    for split, n in (("train", n_train), ("val", n_val)):
        for k, c in enumerate(CLASSES):
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(n):
                pixels = np.clip(rng.normal(60 + 70 * k, 30, (size, size, 3)), 0, 255).astype(np.uint8)
                Image.fromarray(pixels).save(root / split / c / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_image_folder(tmp_path_factory.mktemp("digits"))


pytestmark = pytest.mark.usefixtures("private_cache")


# The tiny folder holds 24 train images: smaller batches than the smoke preset's 64.
TINY = ["--preset", "smoke", "--no-progress", "--set", "train.epochs=1", "--set", "train.batch_size=8"]


def test_every_preset_that_generates_scenes_drops_its_sizes_for_another_dataset():
    for name, preset in PRESETS.items():
        base = preset.config().data
        cfg = resolve_config(name, {"data.name": "imagefolder", "data.root": "/data/x"})
        assert (cfg.data.train_size, cfg.data.val_size, cfg.data.root) == (None, None, "/data/x")
        assert (cfg.data.img_size, cfg.data.augment) == (base.img_size, base.augment)  # the model's input stays
        same = resolve_config(name, {"data.name": base.name})  # naming the preset's own dataset changes nothing
        assert same.data == base
    cfg = resolve_config("cpu", None, ["data.name=cifar10", "data.val_size=500"])  # --set names it too
    assert (cfg.data.name, cfg.data.train_size, cfg.data.val_size) == ("cifar10", None, 500)


def test_train_uses_a_named_dataset_whole(folder, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", *TINY, "--data", "imagefolder", "--data-root", str(folder), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["train_images"], summary["val_images"]) == (3 * N_TRAIN, 3 * N_VAL)
    config = yaml.safe_load((out / "config.yaml").read_text())
    assert config["data"]["train_size"] is None and config["data"]["val_size"] is None


def test_train_subsamples_only_when_asked(folder, tmp_path, capsys):
    out = tmp_path / "run"
    argv = ["train", *TINY, "--data", "imagefolder", "--data-root", str(folder)]
    assert main([*argv, "--set", "data.train_size=16", "--set", "data.val_size=6", "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["train_images"], summary["val_images"]) == (16, 6)
    capsys.readouterr()
    code = main([*argv, "--set", "data.train_size=1000", "--out", str(tmp_path / "too_many")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1
    assert err[0] == "peanchor: error: data.train_size=1000 but the split holds only 24 images"
    assert not (tmp_path / "too_many").exists()


# A reproduce grid and three analyses run whole: CI's; the train test above and the preset test keep the rule in the
# development loop.
@pytest.mark.slow
def test_reproduce_and_analyze_use_a_named_dataset_whole(folder, tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["reproduce", *TINY, "--conditions", "none", "--data", "imagefolder", "--data-root", str(folder)]
    assert main([*argv, "--out", str(out)]) == 0
    run = out / "runs" / "none-s0"
    summary = json.loads((run / "summary.json").read_text())
    analysis = json.loads((run / "analysis" / "analysis.json").read_text())
    assert (summary["train_images"], summary["val_images"], analysis["num_images"]) == (24, 12, 12)

    # analyze a smoke-preset scenes run on the folder: all 12 val images, or the --set subset
    scenes_run = tmp_path / "scenes_run"
    assert main(["train", "--preset", "smoke", "--epochs", "1", "--no-progress", "--out", str(scenes_run)]) == 0
    for extra, expected in (([], 12), (["--set", "data.val_size=5"], 5)):
        dest = tmp_path / f"analysis-{expected}"
        code = main(["analyze", str(scenes_run), "--data", "imagefolder", "--data-root", str(folder), "--no-alpha",
                     "--no-progress", *extra, "--out", str(dest)])  # fmt: skip
        assert code == 0
        assert json.loads((dest / "analysis.json").read_text())["num_images"] == expected
    capsys.readouterr()
    code = main(["analyze", str(scenes_run), "--data", "imagefolder", "--data-root", str(folder), "--set",
                 "data.img_size=64", "--out", str(tmp_path / "refused")])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and "the model's resolution (16 px)" in err[0]
