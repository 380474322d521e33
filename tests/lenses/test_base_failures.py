"""One lens must never lose the cell: a lens that fails (in a pass or in its record) is recorded as failed, and the
other lenses, the accuracies and the FS are written; the files, the summary and the report say so; a rerun of
`peanchor reproduce` measures that lens alone again. Also: the record of a lens not installed here survives a read
and a write, and the data's paths compare as the folders they name."""

from __future__ import annotations

import json
import os
import signal
import warnings

import pytest
import torch

import peanchor.metrics.position_probe as probe_metric
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import resolve_plan
from peanchor.cli import main
from peanchor.lenses import LensFailure, UnknownLensRecord
from peanchor.results.records import (
    CellId,
    ModelResult,
    Results,
    TrainSummary,
    analysis_rows,
    read_analysis,
    write_analysis,
)

from tests.helpers.builders import tiny_info

from tests.helpers.paths import TEST_DATA

INFO = tiny_info()
LU_ERROR = "Pivots given to lu_solve must all be greater or equal to 1. Did you properly pass the result of lu_factor?"


def _broken_compute(self):
    raise RuntimeError(LU_ERROR + "\nsecond line")


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=g)
    return EvalSet.from_tensors(images, torch.arange(16) % 3, INFO)


def _analyse(model, evalset):
    plan = resolve_plan(16, given={"alphas": (1.0, 0.5), "batch_size": 8, "rpi_draws": 2})
    return evaluate_model(model, evalset, plan, info=INFO, device="cpu", progress=False)


def test_a_lens_failing_in_its_record_loses_only_its_record(evalset, micro, tmp_path, monkeypatch):
    model = micro("ape", num_classes=3)
    whole = _analyse(model, evalset)
    monkeypatch.setattr(probe_metric.PositionProbeAccumulator, "compute", _broken_compute)
    r = _analyse(model, evalset)
    assert r.lens_failures == {"position_probe": f"RuntimeError: {LU_ERROR}"}
    assert r.lens("position_probe") is None and isinstance(r.lenses["position_probe"], LensFailure)
    # Everything else is measured as without the failure, to the bit.
    for name in ("ssdc", "attention_distance", "effective_rank"):
        assert r.lens(name) == whole.lens(name)
    assert (r.clean_acc, r.rpi_acc, r.acc, r.delta_ssdc) == (whole.clean_acc, whole.rpi_acc, whole.acc, whole.delta_ssdc)
    assert str(r.fragility) == str(whole.fragility) and r.fragility_undefined == whole.fragility_undefined  # NaN at chance
    assert [p.clean_acc for p in r.alpha_sweep] == [p.clean_acc for p in whole.alpha_sweep]
    # The file holds the failure as one string; it reads back as the same failure and writes back the same.
    path = write_analysis(r, tmp_path / "a")
    doc = json.loads(path.read_text())
    assert doc["lenses"]["position_probe"] == f"failed: RuntimeError: {LU_ERROR}"
    back = read_analysis(path)
    assert back.lens_failures == r.lens_failures
    assert json.loads(write_analysis(back, tmp_path / "b").read_text()) == doc
    # No CSV rows for it; the summary says it failed.
    assert not [row for row in analysis_rows(r) if row["metric"].startswith("probe_")]
    assert any(row["metric"].startswith("probe_") for row in analysis_rows(whole))
    from peanchor.commands.analyze import summary_text

    assert f"position_probe: FAILED (RuntimeError: {LU_ERROR})" in summary_text(r)


def test_a_lens_failing_in_a_pass_is_fed_no_more(evalset, micro, monkeypatch):
    calls = []

    def update(self, tokens, heldout, index=None):
        calls.append(1)
        raise ValueError("bad batch")

    monkeypatch.setattr(probe_metric.PositionProbeAccumulator, "update", update)
    r = _analyse(micro("rope", num_classes=3), evalset)
    assert r.lens_failures == {"position_probe": "ValueError: bad batch"}
    assert len(calls) == 1 and r.lens("ssdc") is not None and r.lens("effective_rank") is not None


@pytest.mark.parametrize("where", ["update", "compute"])
def test_a_stop_signal_inside_a_lens_stops_the_analysis(evalset, micro, monkeypatch, where):
    # A SIGTERM raises Interrupted wherever the worker is; caught as a lens failure, it would be spent and the
    # process would run on (a reproduce worker then waited for its next cell while its parent waited for it).
    from peanchor.core.interrupts import Interrupted

    def stopped(self, *args):
        raise Interrupted(signal.SIGTERM)

    monkeypatch.setattr(probe_metric.PositionProbeAccumulator, where, stopped)
    with pytest.raises(Interrupted, match="stopped by SIGTERM"):
        _analyse(micro("ape", num_classes=3), evalset)


def test_the_required_lens_failing_fails_the_analysis(evalset, micro, monkeypatch):
    from peanchor.metrics import SSDCAccumulator

    monkeypatch.setattr(SSDCAccumulator, "compute", _broken_compute)
    with pytest.raises(RuntimeError, match="lu_solve"):
        _analyse(micro("ape", num_classes=3), evalset)


def test_the_report_shows_the_gap(evalset, micro, tmp_path, monkeypatch):
    from peanchor.report import write_report

    models = []
    for pe in ("none", "ape"):
        if pe == "ape":
            monkeypatch.setattr(probe_metric.PositionProbeAccumulator, "compute", _broken_compute)
        r = _analyse(micro(pe, num_classes=3), evalset)
        cell = CellId(name=f"{pe}-s0", condition=pe, pe=pe, rpt=False, seed=0)
        models.append(ModelResult.from_analysis(r, cell, TrainSummary(), f"runs/{pe}-s0"))
    write_report(Results(models=models, conditions=["none", "ape"], seeds=[0]), tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert f"The probe R² lens failed in the analysis of `ape-s0` (RuntimeError: {LU_ERROR})" in text
    assert "`none-s0`" not in text.split("lens failed in the analysis of")[1].split("\n")[0]


@pytest.mark.slow
def test_a_rerun_measures_only_the_failed_lens_again(tmp_path, capsys, monkeypatch):
    import peanchor.analysis.evaluate as evaluate

    out = tmp_path / "out"
    args = ["reproduce", "--preset", "smoke", "--conditions", "ape", "--out", str(out), "--no-progress"]
    with monkeypatch.context() as m:
        m.setattr(probe_metric.PositionProbeAccumulator, "compute", _broken_compute)
        assert main(args) == 0  # the cell is analysed, with one failed lens
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if "ape-s0: analysed" in x]
    assert f"1 lens FAILED (position_probe: RuntimeError: {LU_ERROR}): rerun to retry it" in line
    analysis = out / "runs" / "ape-s0" / "analysis" / "analysis.json"
    first = json.loads(analysis.read_text())
    assert first["lenses"]["position_probe"].startswith("failed: ")
    status = json.loads((out / "status" / "ape-s0.json").read_text())
    assert status["status"] == "ok" and status["failed_lenses"] == {"position_probe": f"RuntimeError: {LU_ERROR}"}
    results = json.loads((out / "results.json").read_text())
    assert results["models"][0]["position_probe"] == first["lenses"]["position_probe"] and not results["failed"]
    # The rerun: no training, no full analysis, the probe alone measured again.
    monkeypatch.setattr(evaluate, "evaluate_model", lambda *a, **k: pytest.fail("the whole analysis ran again"))
    assert main(args) == 0
    assert "ape-s0: measured again what failed before: position_probe" in capsys.readouterr().err
    second = json.loads(analysis.read_text())
    def others(doc: dict) -> dict:
        return {**doc, "lenses": {k: v for k, v in doc["lenses"].items() if k != "position_probe"}}

    assert others(second) == others(first)
    assert isinstance(second["lenses"]["position_probe"], dict) and read_analysis(analysis).lens_failures == {}
    # ... and it is the record the whole analysis gives.
    fresh = tmp_path / "fresh"
    (fresh / "runs").mkdir(parents=True)
    import shutil

    shutil.copytree(out / "runs" / "ape-s0", fresh / "runs" / "ape-s0", ignore=shutil.ignore_patterns("analysis"))
    monkeypatch.undo()
    assert main(["reproduce", "--preset", "smoke", "--conditions", "ape", "--out", str(fresh), "--no-progress"]) == 0
    whole = json.loads((fresh / "runs" / "ape-s0" / "analysis" / "analysis.json").read_text())
    assert whole["lenses"]["position_probe"] == second["lenses"]["position_probe"]
    in_results = json.loads((out / "results.json").read_text())["models"][0]["position_probe"]
    assert in_results == whole["lenses"]["position_probe"]


def test_the_record_of_a_lens_not_installed_here_is_kept_verbatim(tmp_path):
    """Read from a version-2 file (the records at the top level), it is written back under ``lenses`` as it was."""
    source = TEST_DATA / "analysis-v2-three-lenses.json"
    doc = json.loads(source.read_text())
    doc["attention_entropy"] = {"normal": [1.5, None], "rpi": [1.25, 2.0], "queries": "patches"}
    path = tmp_path / "analysis.json"
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="'attention_entropy', a lens not installed here: kept as it is"):
        r = read_analysis(path)
    assert r.unknown_lenses == ["attention_entropy"] and r.lens("attention_entropy") is None
    assert r.lenses["attention_entropy"] == UnknownLensRecord(doc["attention_entropy"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        again = json.loads(write_analysis(r, tmp_path / "again").read_text())
    assert again["schema_version"] == 3 and again["lenses"]["attention_entropy"] == doc["attention_entropy"]
    assert set(again["lenses"]) == {"ssdc", "position_probe", "attention_distance", "attention_entropy"}
    assert {k: v for k, v in again.items() if k not in ("lenses", "schema_version")} == {
        k: v for k, v in doc.items() if k not in (*again["lenses"], "schema_version")}


def test_a_relative_data_root_is_the_same_folder_as_its_absolute_path(tmp_path, monkeypatch):
    from peanchor.study.pipeline import eval_data_key
    from peanchor.training.config import diff_configs

    (tmp_path / "in100p").mkdir()
    monkeypatch.chdir(tmp_path)
    a = {"data": {"name": "prepared", "root": str(tmp_path / "in100p"), "class_list": None}}
    b = {"data": {"name": "prepared", "root": "in100p", "class_list": None}}
    assert diff_configs(a, b) == {}
    assert diff_configs(a, {"data": {"name": "prepared", "root": "other", "class_list": None}}) != {}
    assert eval_data_key(a["data"]) == eval_data_key(b["data"])
    assert eval_data_key(b["data"])["root"] == os.path.realpath(tmp_path / "in100p")
