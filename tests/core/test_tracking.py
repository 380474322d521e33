"""TensorBoard logging (``--tensorboard``): the event files are read back with TensorBoard's own reader and hold
exactly what metrics.csv, analysis.json and the report hold; without the flag nothing of TensorBoard is imported or
written; without the package the flag is one clear line."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from peanchor.cli import main

if TYPE_CHECKING:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def events(log_dir: Path) -> EventAccumulator:
    """Every scalar, image and text in ``log_dir``, as TensorBoard itself loads them."""
    # imported here, not at the top: a worker that collects this file but runs none of it skips tensorboard
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert list(log_dir.glob("events.out.tfevents.*")), f"no event file in {log_dir}"
    acc = EventAccumulator(str(log_dir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def series(acc: EventAccumulator, tag: str) -> dict[int, float]:
    return {e.step: e.value for e in acc.Scalars(tag)}


pytestmark = pytest.mark.usefixtures("private_cache")


SMOKE = ["--preset", "smoke", "--no-progress", "--set", "data.train_size=128", "--set", "data.val_size=50",
         "--set", "train.batch_size=32", "--set", "train.log_every=2"]  # fmt: skip


@pytest.fixture(scope="module")
def tb_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smoke run (2 epochs of 4 steps) trained with --tensorboard, then analysed with --tensorboard."""
    root = tmp_path_factory.mktemp("tb")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEANCHOR_CACHE", str(root / "cache"))
        assert main(["train", *SMOKE, "--pe", "ape", "--tensorboard", "--out", str(root / "run")]) == 0
        assert main(["analyze", str(root / "run"), "--tensorboard", "--alphas", "1,0.5,0", "--severities",
                     "--no-progress"]) == 0  # fmt: skip
    return root / "run"


def test_training_events_match_metrics_csv(tb_run):
    acc = events(tb_run / "tensorboard")
    rows = list(csv.DictReader((tb_run / "metrics.csv").open()))
    assert len(rows) == 2
    steps_per_epoch = 128 // 32
    for tag, column in (("epoch/train_loss", "train_loss"), ("epoch/train_acc", "train_acc"),
                        ("epoch/val_acc", "val_acc"), ("epoch/lr", "lr")):  # fmt: skip
        logged = series(acc, tag)
        assert sorted(logged) == [steps_per_epoch, 2 * steps_per_epoch], tag
        for row in rows:
            assert logged[int(row["epoch"]) * steps_per_epoch] == pytest.approx(float(row[column]), rel=1e-4), tag
    assert all(v > 0 for v in series(acc, "epoch/images_per_s").values())
    assert all(v > 0 for v in series(acc, "epoch/val_loss").values())
    # the running loss and the learning rate every log_every = 2 steps
    assert sorted(series(acc, "train/loss")) == [2, 4, 6, 8] == sorted(series(acc, "train/lr"))
    assert series(acc, "train/loss")[4] == pytest.approx(float(rows[0]["train_loss"]), rel=1e-4)  # epoch 1's mean


def test_analysis_events_match_analysis_json(tb_run):
    doc = json.loads((tb_run / "analysis" / "analysis.json").read_text())
    acc = events(tb_run / "analysis" / "tensorboard")
    for tag, value in (("analysis/clean_acc", doc["clean_acc"]), ("analysis/rpi_acc", doc["rpi_acc"]),
                       ("analysis/delta_ssdc", doc["delta_ssdc"])):  # fmt: skip
        assert series(acc, tag) == {0: pytest.approx(value, abs=1e-6)}, tag
    undefined = doc.get("fragility_undefined") or {}  # FS at chance: null in the file, not logged
    for name in doc["shifts"]:
        if name in undefined:
            assert doc["fragility"][name] is None and f"fs/{name}" not in acc.Tags()["scalars"]
        else:
            assert series(acc, f"fs/{name}") == {0: pytest.approx(doc["fragility"][name], abs=1e-6)}
        assert series(acc, f"acc/{name}") == {0: pytest.approx(doc["acc"][name], abs=1e-6)}
    for mode in ("normal", "rpi"):
        ssdc = doc["lenses"]["ssdc"][mode]
        assert series(acc, f"ssdc/{mode}") == {i: pytest.approx(v, abs=1e-6) for i, v in enumerate(ssdc)}
        heads = doc["lenses"]["attention_distance"]["manhattan"][mode]  # (layers, heads)
        assert series(acc, f"attention_distance/{mode}") == {i: pytest.approx(sum(h) / len(h), abs=1e-6)
                                                              for i, h in enumerate(heads)}  # fmt: skip
        for target in ("row", "col"):
            r2 = doc["lenses"]["position_probe"][target][mode]
            assert series(acc, f"probe_r2/{target}/{mode}") == {i: pytest.approx(v, abs=1e-6) for i, v in enumerate(r2)}
    for kind, values in doc["severity_fragility"].items():  # null where FS is undefined: not logged
        if any(v is not None for v in values):
            assert series(acc, f"severity_fs/{kind}") == {i + 1: pytest.approx(v, abs=1e-6) for i, v in
                                                          enumerate(values) if v is not None}  # fmt: skip
    sweep = {round(100 * p["alpha"]): p for p in doc["alpha_sweep"]}
    assert sorted(sweep) == [0, 50, 100]
    assert series(acc, "alpha/delta_ssdc") == {s: pytest.approx(p["delta_ssdc"], abs=1e-6) for s, p in sweep.items()}
    fs = {s: pytest.approx(p["fragility"]["jpeg"], abs=1e-6) for s, p in sweep.items() if p["fragility"]["jpeg"] is not None}
    if fs:
        assert series(acc, "alpha/fs/jpeg") == fs
    text = acc.Tensors("analysis/shifts/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "**jpeg**" in text and "preset smoke" in text


def test_without_the_flag_nothing_of_tensorboard_is_imported_or_written(tmp_path):
    """Neither `import peanchor` nor building the CLI imports tensorboard (or datasets); a run writes no events."""
    code = ("import sys, peanchor, peanchor.cli; peanchor.cli.build_parser(); "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('tensorboard', 'datasets') "
            "or m == 'torch.utils.tensorboard']; "
            "print(bad); sys.exit(1 if bad else 0)")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert main(["train", *SMOKE, "--epochs", "1", "--out", str(tmp_path / "run")]) == 0
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_without_the_package_the_flag_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    for argv in (["train", *SMOKE, "--tensorboard", "--out", str(tmp_path / "run")],
                 ["reproduce", *SMOKE, "--conditions", "none", "--tensorboard", "--out", str(tmp_path / "run")]):  # fmt: skip
        assert main(argv) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert err == ["peanchor: error: --tensorboard needs the tensorboard package: pip install 'peanchor[tensorboard]'"]
        assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_reproduce_logs_every_cell_and_the_reports_figures(tmp_path, capsys):
    out = tmp_path / "grid"
    argv = ["reproduce", *SMOKE, "--conditions", "none,ape", "--set", "train.epochs=1", "--tensorboard", "--out", str(out)]
    assert main(argv) == 0
    for cell in ("none-s0", "ape-s0"):
        assert series(events(out / "runs" / cell / "tensorboard"), "epoch/val_acc")
        doc = json.loads((out / "runs" / cell / "analysis" / "analysis.json").read_text())
        logged = series(events(out / "runs" / cell / "analysis" / "tensorboard"), "analysis/clean_acc")
        assert logged == {0: pytest.approx(doc["clean_acc"], abs=1e-6)}
    report = events(out / "tensorboard")
    figures = {p.stem for p in (out / "figures").glob("*.png")}
    assert {"ssdc_per_layer", "alpha_sweep"} <= figures
    assert set(report.Tags()["images"]) == {f"report/{f}" for f in figures}
    image = report.Images("report/ssdc_per_layer")[0]
    assert image.width > 400 and image.height > 200
    before = sorted(p.name for p in out.rglob("events.out.tfevents.*"))
    assert main(argv) == 0  # everything reused: nothing logged twice
    assert sorted(p.name for p in out.rglob("events.out.tfevents.*")) == before
