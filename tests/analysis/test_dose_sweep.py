"""Dose-response sweeps in an analysis (``peanchor.analyze(..., sweeps=[...])``, ``--sweep``): the identity dose is
the main analysis exactly, a dose is the analysis under base + dose, the cost is at most k + 1 passes per batch, a
lens failing at a dose is recorded there, and the sweeps travel through analysis.json, the CSV and the plan."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
import torch

import peanchor
import peanchor.analysis.dose_sweep as dose_sweep
from peanchor.analysis.plan import AnalysisPlan, parse_plan_items, resolve_plan
from peanchor.cli import main
from peanchor.core.errors import ConfigError
from peanchor.lenses import LensFailure
from peanchor.lenses.position_probe import PositionProbeLens
from peanchor.results.records import read_analysis
from tests.helpers.paths import TEST_DATA

STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
FAST = dict(alphas=(), batch_size=8, progress=False, shifts=["jpeg:quality=10", "blur:sigma=1"], rpi_draws=2)
DATA = TEST_DATA


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    """16 random 16 px images of 4 classes."""
    images = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    return images, torch.arange(16) % 4


@pytest.fixture(scope="module")
def peaked(micro):
    """``peaked(pe)``: a ``vit_micro`` whose attention is sharp (its q and k scaled up) and whose head is a unit
    normal draw, so that the edits visibly change its numbers."""

    def build(pe: str) -> torch.nn.Module:
        model = micro(pe, num_classes=4)
        with torch.no_grad():
            for block in model.blocks:
                block.attn.qkv.weight.mul_(20)
            torch.nn.init.normal_(model.head.weight)
        return model

    return build


def numbers(m) -> dict:
    """Every number a dose and an analysis both hold."""
    return {"clean": m.clean_acc, "rpi": m.rpi_acc, "acc": m.acc, "fs": m.fragility, "lenses": m.lenses}


@pytest.mark.parametrize(("pe", "identity"), [("rope", "rope_planes:freqs=none,0-1,1"),
                                              ("ape", "pe_resample:grid=4x4,2x2,6x6"),
                                              ("rope", "pe_resample:grid=4x4,6x6")])  # fmt: skip
@pytest.mark.parametrize("lenses", [None, ["ssdc", "position_probe", "effective_rank"]])
def test_the_identity_dose_is_the_main_analysis_exactly(data, peaked, pe, identity, lenses) -> None:
    result = peanchor.analyze(peaked(pe), *data, sweeps=[identity], lenses=lenses, **STATS, **FAST)
    (sweep,) = result.dose_sweeps
    first, *others = sweep.doses
    assert numbers(first) == numbers(result)
    assert set(first.lenses) == set(result.lenses)
    assert any(numbers(d) != numbers(result) for d in others)  # the other doses do change something


@pytest.mark.parametrize("base", [[], ["head_ablate:layers=0,heads=1"]])
def test_a_dose_is_the_analysis_under_the_base_and_that_dose(data, peaked, base) -> None:
    model = peaked("rope")
    swept = peanchor.analyze(model, *data, interventions=base, sweeps=["rope_planes:axis=x,freqs=0,0-1"],
                             **STATS, **FAST)  # fmt: skip
    for dose, edit in zip(swept.dose_sweeps[0].doses, ["rope_planes:axis=x,freqs=0", "rope_planes:axis=x,freqs=0-1"]):
        alone = peanchor.analyze(model, *data, interventions=[*base, edit], **STATS, **FAST)
        assert numbers(dose) == numbers(alone)
    assert swept.dose_sweeps[0].base == [peanchor.interventions.Intervention.parse(b).edits[0].spec for b in base]


def test_k_doses_cost_at_most_k_plus_one_passes_per_batch(data, peaked, monkeypatch) -> None:
    calls: list[int] = []  # passes of each forward_doses call
    reference = dose_sweep.forward_doses

    def counted(model, images, base, doses, **kw):
        calls.append(1 + len(doses))
        return reference(model, images, base, doses, **kw)

    model = peaked("rope")
    passes = {"n": 0}
    forward = model.forward_intermediates

    def counting(*args, **kw):
        passes["n"] += 1
        return forward(*args, **kw)

    plain = peanchor.analyze(model, *data, lenses=["ssdc", "position_probe"], **STATS, **FAST)
    monkeypatch.setattr(dose_sweep, "forward_doses", counted)
    monkeypatch.setattr(model, "forward_intermediates", counting)
    swept = peanchor.analyze(model, *data, lenses=["ssdc", "position_probe"],
                             sweeps=["rope_planes:freqs=none,0,0-1,0-2"], **STATS, **FAST)  # fmt: skip
    sweep = swept.dose_sweeps[0]
    batches = 2  # 16 images in batches of 8
    # per batch: clean, 2 RPI draws (one permutation per image: they feed the probe too), 2 shifts: one call each,
    # k + 1 = 5 passes
    assert calls == [5] * (1 + 2 + 2) * batches
    assert sweep.passes_per_batch == 5
    assert sweep.forward_passes == 5 * 5
    assert passes["n"] == plain.forward_passes * batches + sweep.forward_passes * batches


def test_a_lens_that_fails_at_a_dose_records_its_failure_there(data, peaked, monkeypatch, tmp_path) -> None:
    update = PositionProbeLens.update

    def fails_off_grid(self, state, batch):
        if batch.tokens.shape[2] != 16:
            raise RuntimeError("not on the trained grid\nsecond line")
        return update(self, state, batch)

    monkeypatch.setattr(PositionProbeLens, "update", fails_off_grid)
    result = peanchor.analyze(peaked("ape"), *data, sweeps=["pe_resample:grid=4x4,2x2"], **STATS, **FAST)
    same, small = result.dose_sweeps[0].doses
    assert small.lenses["position_probe"] == LensFailure("RuntimeError: not on the trained grid")
    assert small.lens("position_probe") is None and small.lens("ssdc") is not None
    assert "position_probe" not in result.lens_failures and same.lens("position_probe") is not None
    result.save(tmp_path)
    doc = json.loads((tmp_path / "analysis.json").read_text())
    assert doc["dose_sweeps"][0]["doses"][1]["lenses"]["position_probe"] == "failed: RuntimeError: not on the trained grid"
    assert read_analysis(tmp_path).dose_sweeps == result.dose_sweeps


def test_the_sweeps_travel_through_the_files_and_the_plan(data, peaked, tmp_path) -> None:
    result = peanchor.analyze(peaked("rope"), *data, sweeps=["rope_planes:freqs=none,0..1"], **STATS, **FAST)
    result.save(tmp_path)
    stored = read_analysis(tmp_path)
    assert stored.dose_sweeps == result.dose_sweeps
    assert stored.settings.sweeps == ["rope_planes:freqs=none,0,1"]
    assert AnalysisPlan.from_result(stored).sweeps == ("rope_planes:freqs=none,0,1",)
    rows = list(csv.DictReader(io.StringIO((tmp_path / "analysis.csv").read_text())))
    dose = [r for r in rows if r["metric"].startswith("dose_")]
    assert {r["dose"] for r in dose} == {"none", "0", "1"} and {r["sweep"] for r in dose} == {"rope_planes:freqs=none,0,1"}
    layer0 = [r for r in dose if r["metric"] == "dose_ssdc_rpi" and r["dose"] == "1" and r["layer"] == "0"]
    assert float(layer0[0]["value"]) == result.dose_sweeps[0].doses[2].lens("ssdc").rpi[0]
    assert all(r["sweep"] == "" for r in rows if not r["metric"].startswith("dose_"))
    frame = stored.to_pandas()
    picked = frame[(frame.metric == "dose_fragility") & (frame["shift"] == "blur") & (frame.dose == "0")]
    assert picked.value.tolist() == pytest.approx([result.dose_sweeps[0].doses[1].fragility["blur"]], nan_ok=True,
                                                  abs=0)  # NaN where the clean accuracy is at chance


def test_files_without_sweeps_read_and_write_as_before(data, peaked, tmp_path) -> None:
    old = read_analysis(DATA / "analysis-v2-three-lenses.json")
    assert old.dose_sweeps is None and AnalysisPlan.from_result(old).sweeps == ()
    result = peanchor.analyze(peaked("ape"), *data, **STATS, **FAST)
    result.save(tmp_path)
    assert "dose_sweeps" not in json.loads((tmp_path / "analysis.json").read_text())
    assert "sweeps" not in json.loads((tmp_path / "analysis.json").read_text())["settings"]
    assert (tmp_path / "analysis.csv").read_text().splitlines()[0] == "metric,layer,head,alpha,shift,severity,value"


def test_the_plan_reads_sweeps_from_set_items_and_refuses_a_bad_one_in_a_line() -> None:
    items = parse_plan_items(["analysis.sweeps=rope_planes:freqs=none,0-3"])
    assert items == {"sweeps": "rope_planes:freqs=none,0-3"}
    plan = AnalysisPlan({"jpeg": peanchor.analysis.shifts.Shift("jpeg", quality=10)}, **items)
    assert plan.sweeps == ("rope_planes:freqs=none,0-3",) and AnalysisPlan.from_dict(plan.to_dict()) == plan
    # a preset's analysis defaults (the bottom layer) carry sweeps too, and --set replaces them
    preset = resolve_plan(32, defaults={"sweeps": ["pe_zero:prefix=zero,keep"]})
    assert preset.sweeps == ("pe_zero:prefix=zero,keep",)
    assert resolve_plan(32, defaults={"sweeps": ["pe_zero:prefix=zero,keep"]},
                        set_items=["analysis.sweeps=[patch:layer=0..1]"]).sweeps == ("patch:layer=0,1",)  # fmt: skip
    with pytest.raises(ConfigError, match=r"^analysis.sweeps: sweep 'rope_planes:frqs=1': intervention rope_planes "
                                          r"has no parameter 'frqs'; valid: layers, heads, axis, freqs$"):  # fmt: skip
        AnalysisPlan({"jpeg": peanchor.analysis.shifts.Shift("jpeg", quality=10)}, sweeps=["rope_planes:frqs=1"])


def test_a_dose_the_model_cannot_take_is_one_line_before_any_pass(data, peaked) -> None:
    with pytest.raises(ConfigError, match=r"rope_planes acts at rope.tables, which peanchor:ape does not have"):
        peanchor.analyze(peaked("ape"), *data, sweeps=["rope_planes:freqs=0,1"], **STATS, **FAST)


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    """A run directory as `peanchor train --preset smoke --pe rope` leaves it (untrained)."""
    from peanchor.checkpoint.files import save_model
    from peanchor.presets.catalog import resolve_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(resolve_config("smoke", {"model.pe": "rope"}).to_yaml())
    torch.manual_seed(0)
    save_model(peanchor.create_model("vit_micro", pe="rope", num_classes=10, img_size=16).eval(), run / "model.safetensors")
    return run


def test_the_cli_refuses_a_bad_sweep_in_one_line(run_dir, tmp_path, capsys) -> None:
    out = tmp_path / "out"
    code = main(["analyze", str(run_dir), "--images", "12", "--no-alpha", "--device", "cpu", "--no-progress", "--out",
                 str(out), "--sweep", "rope_planes:freqs=0,1", "--sweep", "rope_planes:frqs=1"])  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and not out.exists()
    assert err[0].endswith("sweep 'rope_planes:frqs=1': intervention rope_planes has no parameter 'frqs'; valid: "
                           "layers, heads, axis, freqs")


@pytest.mark.slow
def test_the_cli_measures_repeated_sweeps_on_its_edits(run_dir, tmp_path) -> None:
    out = tmp_path / "out"
    assert main(["analyze", str(run_dir), "--images", "12", "--no-alpha", "--device", "cpu", "--no-progress", "--out",
                 str(out), "--intervention", "head_ablate:layers=0,heads=0", "--sweep", "rope_planes:freqs=none,0-1",
                 "--sweep", "patch:layer=0..1"]) == 0  # fmt: skip
    doc = json.loads((out / "analysis.json").read_text())
    assert [s["sweep"] for s in doc["dose_sweeps"]] == ["rope_planes:freqs=none,0-1", "patch:layer=0,1"]
    assert doc["settings"]["sweeps"] == ["rope_planes:freqs=none,0-1", "patch:layer=0,1"]
    first = doc["dose_sweeps"][0]["doses"][0]
    assert first["clean_acc"] == doc["clean_acc"] and first["lenses"]["ssdc"] == doc["lenses"]["ssdc"]
    assert all(s["base"] == ["head_ablate:layers=0,heads=0,value=zero"] for s in doc["dose_sweeps"])


@pytest.mark.slow
def test_reproduce_sweeps_from_set_and_pe_zero_leaves_no_anchored_structure_in_trained_ape_models(tmp_path) -> None:
    """The oracle on trained smoke models: with the absolute table zeroed, nothing is anchored to the slots, so SSDC
    under RPI is about 0 at every layer of every absolute-PE model (sincos keeps plenty without the edit)."""
    from peanchor.results.records import read_results

    out = tmp_path / "grid"
    assert main(["reproduce", "--preset", "smoke", "--conditions", "ape,sincos", "--out", str(out), "--no-progress",
                 "--set", "analysis.sweeps=pe_zero:prefix=zero,keep"]) == 0  # fmt: skip
    results = read_results(out)
    assert results.analysis["sweeps"] == ["pe_zero:prefix=zero,keep"]
    for model in results.models:
        (sweep,) = model.dose_sweeps
        assert [d.dose for d in sweep.doses] == ["zero", "keep"]
        for dose in sweep.doses:
            assert all(abs(v) < 0.1 for v in dose.lens("ssdc").rpi), (model.name, dose.dose, dose.lens("ssdc").rpi)
    sincos = next(m for m in results.models if m.condition == "sincos")
    assert min(sincos.ssdc.rpi) > 0.5  # the oracle is not trivially met: the edit removes what was there
    assert "## Dose-response sweeps" in (out / "report.md").read_text()
