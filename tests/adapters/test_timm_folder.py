"""A timm model folder (config.json + model.safetensors, as timm's save_for_hf writes it) is a timm model wherever a
name is taken: the same architecture, arguments and weights, offline; a folder that is not one is one line."""

from __future__ import annotations

import json

import pytest
import torch

timm = pytest.importorskip("timm")

from peanchor.adapters import load_timm  # noqa: E402
from peanchor.cli import main  # noqa: E402
from peanchor.core.errors import CheckpointError  # noqa: E402

ARGS = {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 4, "num_classes": 3}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    from timm.models import save_for_hf

    torch.manual_seed(0)
    model = timm.create_model("vit_tiny_patch16_224", pretrained=False, **ARGS).eval()
    folder = tmp_path_factory.mktemp("timm") / "tiny"
    save_for_hf(model, str(folder), model_args={k: v for k, v in ARGS.items() if k != "num_classes"})
    return model, folder


def test_a_saved_folder_loads_as_the_same_model(saved):
    model, folder = saved
    wrapped = load_timm(folder)
    assert wrapped.grid == (4, 4) and wrapped.depth == 2
    images = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        torch.testing.assert_close(wrapped(images), model(images), rtol=0, atol=0)
    assert torch.equal(load_timm(folder / "config.json")(images), wrapped(images))


def test_the_command_line_audits_it(saved, tmp_path, capsys):
    _, folder = saved
    report = tmp_path / "audit.json"
    code = main(["audit", "--timm", str(folder), "--json", str(report)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert json.loads(report.read_text())["passed"] is True


def test_a_folder_that_is_not_a_timm_model_is_one_line(saved, tmp_path):
    _, folder = saved
    with pytest.raises(CheckpointError, match="has no config.json"):
        load_timm(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit"}))
    with pytest.raises(CheckpointError, match="names no timm architecture .* --hf"):
        load_timm(tmp_path)
    (tmp_path / "config.json").write_text((folder / "config.json").read_text())
    with pytest.raises(CheckpointError, match="has no weights"):
        load_timm(tmp_path)
    with pytest.raises(CheckpointError, match="holds its own weights"):
        load_timm(folder, weights=folder / "model.safetensors")
