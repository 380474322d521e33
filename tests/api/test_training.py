"""``peanchor.train``: one condition from a preset in Python, the same run as ``peanchor train`` with the same
values (config.yaml, the weights), resumable, and one line for a keyword it does not know."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

import peanchor
from peanchor.cli import main
from peanchor.core.errors import ConfigError

SMALL = {"data.train_size": 64, "data.val_size": 32, "train.epochs": 1}


def test_a_run_trained_in_python_is_the_run_the_command_line_trains(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    run = peanchor.train("smoke", tmp_path / "py", pe="ape", seed=3, settings=SMALL, progress=False)
    assert run == tmp_path / "py"
    sets = [f"--set={key}={value}" for key, value in SMALL.items()]
    assert main(["train", "--preset", "smoke", "--pe", "ape", "--seed", "3", "--out", str(tmp_path / "cli"),
                 "--no-progress", *sets]) == 0  # fmt: skip
    assert (run / "config.yaml").read_text() == (tmp_path / "cli" / "config.yaml").read_text()
    ours, theirs = load_file(run / "model.safetensors"), load_file(tmp_path / "cli" / "model.safetensors")
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["condition"] == "ape" and summary["epochs"] == 1
    model = peanchor.load_model(run)
    assert model.pe_name == "ape"
    # a finished run is left alone: the same call again trains nothing and returns the same path
    stamp = (run / "model.safetensors").stat().st_mtime_ns
    assert peanchor.train("smoke", run, pe="ape", seed=3, settings=SMALL, progress=False) == run
    assert (run / "model.safetensors").stat().st_mtime_ns == stamp


def test_the_default_run_directory_is_the_command_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    run = peanchor.train("smoke", pe="none", rpt=True, settings=SMALL, progress=False)
    assert run == Path("runs") / "train-smoke-none-rpt-s0" and (tmp_path / run / "model.safetensors").is_file()


@pytest.mark.parametrize(("given", "message"), [
    ({"pee": "ape"}, "unknown keyword 'pee' (did you mean pe?)"),
    ({"lr": 1e-3}, "any other config key goes in settings="),
])  # fmt: skip
def test_an_unknown_keyword_is_one_line_before_anything_runs(tmp_path: Path, given: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        peanchor.train("smoke", tmp_path / "x", **given)
    assert not (tmp_path / "x").exists()


def test_a_bad_setting_is_the_config_error_the_command_line_gives(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model.pe"):
        peanchor.train("smoke", tmp_path / "x", settings={"model.pe": "rop"})
    assert not (tmp_path / "x").exists()
