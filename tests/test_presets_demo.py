"""The ``demo`` preset: a first ``peanchor reproduce`` that shows something in about two minutes. It resolves like
every preset, brings its own conditions (none, ape, rope, rpt) unless ``--conditions`` names others, and its report
states the ghost-map claim (structure in order without a PE, none under RPI). The full run is too long for CI: the
slow test runs it at a reduced size and checks the claim's line, not its verdict."""

from __future__ import annotations

import json

import pytest

from peanchor.cli import main
from peanchor.presets.catalog import PRESETS, get_preset, preset_help, resolve_config
from peanchor.study import ReproduceOptions


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEANCHOR_CACHE", str(tmp_path / "cache"))


def test_the_demo_preset_resolves_with_fewer_tokens_than_cpu_and_the_cpu_presets_data_unchanged():
    demo, cpu = resolve_config("demo", {"model.pe": "ape"}), resolve_config("cpu", {"model.pe": "ape"})
    assert demo.preset == "demo" and demo.data.name == "scenes" and demo.data.img_size == 32
    assert (demo.data.img_size // demo.model.patch_size) ** 2 < (cpu.data.img_size // cpu.model.patch_size) ** 2
    assert demo.model.pe_kwargs == cpu.model.pe_kwargs == {"init_std": 0.2}  # the cpu preset's APE init
    # the cpu preset's data are published numbers: the demo changes none of them
    assert (cpu.data.train_size, cpu.data.val_size, cpu.data.img_size, cpu.model.patch_size) == (8000, 2000, 32, 4)
    assert "demo" in PRESETS and "demo: " in preset_help()
    # a preset without its own conditions keeps the paper's
    assert get_preset("cpu").conditions is None
    assert [c.name for c in ReproduceOptions(preset="cpu").conditions] == ["none", "ape", "sincos", "rope", "rpt"]


def test_reproduce_takes_the_demo_presets_conditions_unless_told_otherwise(tmp_path, capsys):
    assert main(["reproduce", "--preset", "demo", "--list", "--out", str(tmp_path / "d")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("peanchor train")]
    assert [line.split("--pe ")[1].split()[0] + (" rpt" if "--rpt" in line else "") for line in lines] == [
        "none", "ape", "rope", "ape rpt"]  # fmt: skip
    assert main(["reproduce", "--preset", "demo", "--conditions", "sincos", "--list", "--out", str(tmp_path / "e")]) == 0
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("peanchor train")][0].count(
        "--pe sincos") == 1  # fmt: skip


@pytest.mark.slow
def test_a_reduced_demo_run_reports_the_ghost_map_claim(tmp_path):
    out = tmp_path / "out"
    small = ["--set", "data.train_size=256", "--set", "data.val_size=100", "--set", "train.epochs=1",
             "--set", "analysis.batch_size=50"]  # fmt: skip
    assert main(["reproduce", "--preset", "demo", "--conditions", "none,rpt", "--no-progress", "--jobs", "1",
                 *small, "--out", str(out)]) == 0  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert results["preset"] == "demo" and [m["condition"] for m in results["models"]] == ["none", "rpt"]
    report = (out / "report.md").read_text()
    claim = next(line for line in report.splitlines() if "the spatial structure is content-driven" in line)
    assert "`none`: largest |SSDC| under RPI" in claim and "`rpt`: largest |SSDC| under RPI" in claim
    assert "in order" in claim
