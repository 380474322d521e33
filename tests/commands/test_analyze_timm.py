"""`peanchor analyze --timm`: a local timm model through the same analysis as our own runs."""

from __future__ import annotations

import json

import pytest
import torch

timm = pytest.importorskip("timm")

from peanchor.cli import main  # noqa: E402

TINY = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4)


def _image_folder(root, classes, per_class=4):
    from torchvision.io import write_png

    g = torch.Generator().manual_seed(0)
    for split in ("train", "val"):
        for c in classes:
            d = root / split / c
            d.mkdir(parents=True)
            for i in range(per_class):
                write_png(torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g), str(d / f"{i}.png"))


def _save_weights(path, name, num_classes, **kw):
    from safetensors.torch import save_file

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=num_classes, **kw)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(path))


def _timm_args():
    return [a for k, v in TINY.items() for a in ("--timm-arg", f"{k}={v}")]


@pytest.mark.parametrize("name", ["vit_small_patch16_224", "vit_small_patch16_rope_mixed_224"])
def test_analyze_timm_model_writes_the_full_analysis(tmp_path, name, capsys):
    classes = ["a", "b", "c"]
    _image_folder(tmp_path / "data", classes)
    weights = tmp_path / "w.safetensors"
    _save_weights(weights, name, num_classes=3, **TINY)
    out = tmp_path / "out"
    code = main(["analyze", "--timm", name, "--weights", str(weights), *_timm_args(), "--data", "imagefolder",
                 "--data-root", str(tmp_path / "data"), "--alphas", "1,0", "--out", str(out), "--no-progress"])  # fmt: skip
    assert code == 0
    result = json.loads((out / "analysis.json").read_text())
    ssdc = result["lenses"]["ssdc"]
    assert len(ssdc["rpi"]) == 2 and result["num_images"] == 12
    assert result["delta_ssdc"] == ssdc["rpi"][1] - ssdc["rpi"][0]
    assert [e["alpha"] for e in result["alpha_sweep"]] == [1.0, 0.0]


def test_imagenet_subset_keeps_its_logits_in_dataset_order(tmp_path):
    from peanchor.adapters import load_timm_model
    from peanchor.api.analysis import match_classes

    weights = tmp_path / "w.safetensors"
    _save_weights(weights, "vit_small_patch16_224", num_classes=1000, **TINY)
    model = load_timm_model("vit_small_patch16_224", weights=str(weights), **TINY)
    x = torch.randn(2, 3, 32, 32)
    full = model(x)
    match_classes(model, ["n01443537", "n01440764"])  # ImageNet-1k indices 1 and 0
    torch.testing.assert_close(model(x), full[:, [1, 0]])


def test_mismatched_classes_and_missing_data_are_one_line_errors(tmp_path, capsys):
    _image_folder(tmp_path / "data", ["a", "b"])
    weights = tmp_path / "w.safetensors"
    _save_weights(weights, "vit_small_patch16_224", num_classes=5, **TINY)
    base = ["analyze", "--timm", "vit_small_patch16_224", "--weights", str(weights), *_timm_args(), "--no-progress"]
    assert main([*base, "--out", str(tmp_path / "o")]) == 2
    assert "--timm needs --data" in capsys.readouterr().err
    assert main([*base, "--data", "imagefolder", "--data-root", str(tmp_path / "data"), "--out", str(tmp_path / "o")]) == 2
    assert "5 outputs but the dataset has 2 classes" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
