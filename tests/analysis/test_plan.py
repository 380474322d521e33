"""The analysis plan: one checked value, read and written exactly, resolved in three layers (defaults, then what
is given, then ``--set analysis.*``), the same in analyze, reproduce and the files they write."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from peanchor.analysis.plan import (
    DEFAULT_ALPHAS,
    LENS_NAMES,
    SETTINGS_KEYS,
    AnalysisPlan,
    parse_plan_items,
    resolve_plan,
    split_plan_items,
)
from peanchor.analysis.shifts import Shift
from peanchor.settings.conditions import parse_conditions
from peanchor.core.errors import ConfigError
from peanchor.results.records import AnalysisResult, AnalysisSettings, ModelInfo, SSDCLayers
from peanchor.study import ReproduceOptions, list_commands

SHIFTS = {"jpeg": Shift("jpeg", quality=10), "blur": Shift("blur", kernel_size=9, sigma=1.0)}


def plan(**settings) -> AnalysisPlan:
    return AnalysisPlan(SHIFTS, {"jpeg": "preset cpu", "blur": "--shift blur:sigma=1.0"}, **settings)


def test_the_plans_settings_are_the_files_settings():
    """Every setting of the plan is a field of analysis.json's settings and back, so neither can drift; the file
    adds only where and on what it ran."""
    recorded = {f.name for f in dataclasses.fields(AnalysisSettings)}
    planned = {f.name for f in dataclasses.fields(AnalysisPlan)}
    assert recorded - {"evalset", "device"} == planned - {"shifts", "shift_sources"} == set(SETTINGS_KEYS)


def test_the_defaults():
    p = AnalysisPlan(SHIFTS)
    assert p.alphas == DEFAULT_ALPHAS == (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)
    assert (p.rpi_draws, p.seed, p.batch_size, p.max_images, p.severities, p.bootstrap) == (1, 0, 256, None, False, 200)
    assert (p.rpi_mode, p.bootstrap_groups) == ("per_image", 50)
    assert (p.ssdc_mode, p.metric, p.probe_ridge, p.probe_holdout) == ("mean_similarity", "manhattan", 1e-3, 0.5)
    assert p.lenses == LENS_NAMES == ("ssdc", "position_probe", "attention_distance", "effective_rank")
    assert p.shift_sources == {}


def test_values_are_normalised():
    p = plan(alphas=[1, 0.5, 1, 0], lenses=["position_probe", "ssdc"], probe_ridge=1, probe_holdout=0.25)
    assert p.alphas == (1.0, 0.5, 0.0) and all(type(a) is float for a in p.alphas)
    assert p.lenses == ("ssdc", "position_probe") and type(p.probe_ridge) is float
    assert plan(alphas=0.5).alphas == (0.5,) and plan(alphas=()).alphas == ()
    p = plan(alphas=np.linspace(1, 0, 3), rpi_draws=np.int64(2), probe_holdout=np.float32(0.25))  # a script's numbers
    assert p.alphas == (1.0, 0.5, 0.0) and type(p.rpi_draws) is int and type(p.probe_holdout) is float
    assert json.loads(json.dumps(p.to_dict()))["rpi_draws"] == 2


BAD = [  # (key, refused, accepted): both sides of every check
    ("alphas", [1.0, -0.1], [1.0, 0.0]),
    ("alphas", [math.inf], [1e6]),
    ("alphas", [True], [1]),
    ("alphas", "1,0.5", [1, 0.5]),
    ("rpi_draws", 0, 1),
    ("rpi_draws", True, 2),
    ("rpi_draws", 1.0, 1),
    ("seed", "0", 0),
    ("seed", False, 3),
    ("batch_size", 0, 1),
    ("max_images", 0, 1),
    ("max_images", 2.5, None),
    ("bootstrap", -1, 0),
    ("severities", 1, True),
    ("ssdc_mode", "mean", "per_image"),
    ("metric", "cosine", "euclidean"),
    ("probe_ridge", 0.0, 1e-9),
    ("probe_ridge", math.inf, 1e9),
    ("probe_ridge", math.nan, 1e-3),
    ("probe_ridge", True, 1),
    ("probe_holdout", 0.0, 1e-6),
    ("probe_holdout", 1.0, 1 - 1e-6),
    ("probe_holdout", False, 0.5),
    ("lenses", ["ranks", "ssdc"], ["ssdc"]),
    ("lenses", ["attention_distance"], ["attention_distance", "ssdc"]),
    ("lenses", "ssdc", ["ssdc"]),
]  # fmt: skip


@pytest.mark.parametrize(("key", "refused", "accepted"), BAD, ids=[f"{k}={r!r}" for k, r, _ in BAD])
def test_every_check_is_one_line_naming_the_key(key, refused, accepted):
    with pytest.raises(ConfigError) as e:
        plan(**{key: refused})
    text = str(e.value)
    assert "\n" not in text and text.startswith(f"analysis.{key}="), text
    plan(**{key: accepted})


def test_the_shifts_are_checked():
    for shifts in ({}, {"jpeg": {"kind": "jpeg", "quality": 10}}, None):
        with pytest.raises(ConfigError, match=r"^analysis\.shifts="):
            AnalysisPlan(shifts)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^analysis\.shift_sources="):
        AnalysisPlan(SHIFTS, {"contrast": "--shift contrast:factor=0.3"})


def test_equality_is_what_is_measured():
    assert plan() == AnalysisPlan(SHIFTS) and hash(plan()) == hash(AnalysisPlan(SHIFTS))  # sources do not count
    assert plan() == AnalysisPlan(dict(reversed(list(SHIFTS.items()))))  # nor the shifts' order
    for change in ({"alphas": (1.0,)}, {"rpi_draws": 2}, {"lenses": ("ssdc",)}, {"max_images": 10}):
        assert plan(**change) != plan(), change
    assert plan().for_model(scalable=True).alphas == DEFAULT_ALPHAS
    assert plan().for_model(scalable=False) == plan(alphas=())


def test_to_dict_and_from_dict_round_trip_exactly():
    p = plan(alphas=(1.0, 0.5), rpi_draws=3, max_images=40, severities=True, lenses=("ssdc", "position_probe"))
    doc = json.loads(json.dumps(p.to_dict()))
    again = AnalysisPlan.from_dict(doc)
    assert again == p and again.shift_sources == p.shift_sources and again.to_dict() == doc
    assert doc["shifts"]["blur"] == {"kind": "blur", "kernel_size": 9, "sigma": 1.0} and doc["alphas"] == [1.0, 0.5]
    with pytest.raises(ConfigError, match="unknown analysis plan key 'draws'"):
        AnalysisPlan.from_dict({**doc, "draws": 2})


def _result(settings: AnalysisSettings, shifts: dict, sources: dict | None, source: dict) -> AnalysisResult:
    return AnalysisResult(
        clean_acc=0.5, rpi_acc=0.4, lenses={"ssdc": SSDCLayers(normal=[0.6, 0.5], rpi=[0.1, 0.3], rpi_std=[0.0, 0.0])},
        delta_ssdc=0.2, acc={}, fragility={}, shifts=shifts, shift_sources=sources, alpha_sweep=[], num_images=8,
        forward_passes=4, passes={}, seconds=1.0, timing={},
        model=ModelInfo(pe="ape", depth=2, grid=[4, 4], scalable=True), settings=settings, source=source,
    )  # fmt: skip


def test_settings_record_and_from_result_round_trip():
    p = plan(alphas=(1.0, 0.0), bootstrap=5, max_images=8, metric="euclidean", lenses=("ssdc",))
    settings = p.settings_record("fingerprint", "cpu")
    assert (settings.evalset, settings.device, settings.alphas, settings.lenses) == ("fingerprint", "cpu", [1.0, 0.0],
                                                                                      ["ssdc"])  # fmt: skip
    result = _result(settings, {k: s.describe() for k, s in SHIFTS.items()}, dict(p.shift_sources), {})
    again = AnalysisPlan.from_result(result)
    assert again == p and again.shift_sources == p.shift_sources


def test_an_analysis_json_from_before_the_plan_reads_as_its_plan():
    """A schema-2 file written before settings recorded max_images and lenses: the three lenses of that time (so
    today's plan, with the effective rank, is not the same), and the subset size reproduce kept in the source."""
    old = AnalysisSettings(alphas=[1.0], rpi_draws=1, seed=0, ssdc_mode="mean_similarity", metric="manhattan",
                           bootstrap=0, severities=False, batch_size=25, evalset="x", device="cpu", probe_ridge=1e-3,
                           probe_holdout=0.5)  # fmt: skip
    result = _result(old, {"jpeg": {"kind": "jpeg", "quality": 10}}, None, {"max_images": 100})
    p = AnalysisPlan.from_result(result)
    assert p.lenses == ("ssdc", "position_probe", "attention_distance") != LENS_NAMES
    assert p.max_images == 100 and p.batch_size == 25 and p.shift_sources == {}


def test_the_layers_set_beats_given_beats_defaults():
    p = resolve_plan(32, defaults={"rpi_draws": 2, "batch_size": 100, "severities": True, "seed": 4},
                     given={"rpi_draws": 3, "batch_size": 50, "seed": None, "alphas": None},
                     set_items=["analysis.batch_size=10", "analysis.alphas=[1, 0]"])  # fmt: skip
    assert (p.rpi_draws, p.batch_size, p.severities, p.seed, p.alphas) == (3, 10, True, 4, (1.0, 0.0))
    base = resolve_plan(32, defaults=p, given={"rpi_draws": 1})  # a whole plan as the bottom layer: its shifts too
    assert base.rpi_draws == 1 and base.batch_size == 10 and base.shifts == p.shifts


def test_the_shifts_come_from_the_preset_or_the_rule_then_shift():
    cpu = ("cpu", {"jpeg": {"kind": "jpeg", "quality": 10}, "blur": {"kind": "blur", "sigma": 1.0}})
    p = resolve_plan(32, preset_shifts=cpu, shift_specs=["contrast:factor=0.3", "jpeg:quality=20"])
    assert list(p.shifts) == ["jpeg", "blur", "contrast"] and p.shifts["jpeg"] == Shift("jpeg", quality=20)
    assert p.shifts["blur"] == Shift("blur", kernel_size=9, sigma=1.0)  # resolved for 32 px
    assert p.shift_sources == {"jpeg": "--shift jpeg:quality=20", "blur": "preset cpu",
                               "contrast": "--shift contrast:factor=0.3"}  # fmt: skip
    assert resolve_plan(32, preset_shifts=cpu, shift_specs=["jpeg:quality=10"]) == resolve_plan(32, preset_shifts=cpu)
    only = resolve_plan(32, preset_shifts=cpu, shift_specs=["contrast:factor=0.3"], only_given_shifts=True)
    assert list(only.shifts) == ["contrast"]
    assert resolve_plan(224).shift_sources["jpeg"] == "resolution rule (paper)"
    with pytest.raises(ConfigError, match="shifts=\\[\\]: give at least one shift"):
        resolve_plan(32, only_given_shifts=True)


def test_set_items():
    others, plan = split_plan_items(["a.b=1", "analysis.seed=2", " analysis.metric=euclidean"])
    assert ([str(i) for i in others], [str(i) for i in plan]) == (
        ["a.b=1"], ["analysis.seed=2", " analysis.metric=euclidean"])  # fmt: skip
    assert parse_plan_items(["analysis.severities=true", "analysis.probe_ridge=1e-2"]) == {
        "severities": True, "probe_ridge": 0.01}  # fmt: skip
    with pytest.raises(ConfigError) as e:
        parse_plan_items(["analysis.draws=2"])
    assert "unknown analysis key 'analysis.draws'; valid keys: analysis.alphas, analysis.rpi_draws" in str(e.value)
    with pytest.raises(ConfigError, match="chosen with --shift"):
        parse_plan_items(["analysis.shifts={}"])
    with pytest.raises(ConfigError, match=r"^analysis\.rpi_draws='two': expected an integer >= 1"):
        resolve_plan(32, set_items=["analysis.rpi_draws=two"])


# ---- reproduce: the plan of every cell ---------------------------------------------------------


def test_reproduce_resolves_each_cells_plan_once_in_layers():
    options = ReproduceOptions(preset="cpu", conditions=parse_conditions("ape,rpt"), severities=False,
                               shifts=["contrast:factor=0.3"],
                               set_items=["optim.lr=3e-4", "analysis.rpi_draws=3", "analysis.severities=true"])  # fmt: skip
    ape, rpt = options.cells()[:2]
    p = options.plan_for(ape)
    assert p is options.plan_for(ape) and options.cell_config(ape) is options.cell_config(ape)  # resolved once
    assert options.with_runtime(jobs=2, progress=False).plan_for(ape) is p  # a copy for the workers keeps it
    with pytest.raises(ValueError):
        options.with_runtime(preset="smoke")
    assert p.alphas == (1.0, 0.8, 0.6, 0.4, 0.2) and p.batch_size == 100  # the preset's defaults
    assert p.rpi_draws == 3 and p.severities  # --set analysis.* beats --no-severities, which beats the preset
    assert list(p.shifts) == ["jpeg", "blur", "contrast"] and p.shift_sources["jpeg"] == "preset cpu"
    assert options.plan_for(rpt).alphas == () and options.grid_plan(rpt).alphas == p.alphas  # no sweep for RPT
    assert [str(i) for i in options.cell_set_items(ape)] == ["optim.lr=3e-4"]  # the config sees no analysis key
    assert [(i.key, i.value) for i in options.plan_items()] == [("analysis.rpi_draws", 3), ("analysis.severities", True)]
    assert options.cell_config(ape).optim.lr == 3e-4
    smoke = ReproduceOptions(preset="smoke", conditions=parse_conditions("none"), severities=True)
    assert smoke.plan_for(smoke.cells()[0]).severities and smoke.plan_for(smoke.cells()[0]).batch_size == 25
    paper = ReproduceOptions(preset="paper", conditions=parse_conditions("ape"))
    assert paper.plan_for(paper.cells()[0]).batch_size == 256  # no batch size of its own: train.eval_batch_size


def test_reproduce_reads_its_set_items_once_and_splits_off_the_plans_own_keys(monkeypatch):
    from peanchor.settings import set_items

    reads = []
    monkeypatch.setattr(set_items.SetItem, "parse", classmethod(
        lambda cls, item, _parse=set_items.SetItem.parse.__func__: (
            reads.append(item) if isinstance(item, str) else None) or _parse(cls, item)))  # text read (not a read item)
    options = ReproduceOptions(preset="smoke", conditions=parse_conditions("none,ape"),
                               set_items=["optim.lr=3e-4", "ape:optim.pe_lr_mult=10", "analysis.rpi_draws=2"])
    cells = options.cells()
    for cell in cells:
        options.cell_config(cell), options.plan_for(cell)
    list_commands(options)
    assert sorted(reads) == sorted(["optim.lr=3e-4", "optim.pe_lr_mult=10", "analysis.rpi_draws=2"])  # once each
    ape = next(c for c in cells if c.condition.name == "ape")
    assert options.cell_config(ape).optim.pe_lr_mult == 10 and options.plan_for(ape).rpi_draws == 2


def test_list_leaves_analysis_keys_out_of_the_train_lines():
    options = ReproduceOptions(preset="smoke", conditions=parse_conditions("none"),
                               set_items=["analysis.rpi_draws=2", "train.epochs=1"])  # fmt: skip
    tail = ["--preset", "smoke", "--set", "analysis.rpi_draws=2", "--set", "train.epochs=1"]
    train, *_, final, _, report = list_commands(options, tail)
    assert "analysis.rpi_draws" not in train and "--set train.epochs=1" in train
    assert "--set analysis.rpi_draws=2" in final and report.startswith("peanchor report")
    with pytest.raises(ConfigError, match="the analysis plan is the same for every cell; drop the 'none:' prefix"):
        ReproduceOptions(preset="smoke", conditions=parse_conditions("none"), set_items=["none:analysis.seed=1"])


def test_assemble_takes_the_planned_shifts_from_the_manifests_plan(tmp_path):
    """Before any analysis, results.json lists the shifts the grid will be measured under: the plan recorded in
    reproduce.json, or, for a manifest written before it recorded one, the preset's with its --shift specs."""
    from peanchor.core import fileio
    from peanchor.study.assemble import MANIFEST, assemble_results

    recorded = plan(alphas=(1.0, 0.0))
    grid = {"preset": "cpu", "conditions": ["ape"], "seeds": [0], "data": {"name": "scenes", "img_size": 32},
            "shifts": ["contrast:factor=0.3"]}  # fmt: skip
    fileio.write_json(tmp_path / "new" / MANIFEST, {**grid, "analysis": recorded.to_dict()})
    results = assemble_results(tmp_path / "new")
    assert results.missing == ["ape-s0"] and results.analysis == recorded.to_dict()
    assert results.shifts == {k: s.describe() for k, s in SHIFTS.items()} and results.shift_sources["jpeg"] == "preset cpu"
    fileio.write_json(tmp_path / "old" / MANIFEST, {**grid, "analysis": {"alphas": [1.0], "rpi_draws": 2}})
    results = assemble_results(tmp_path / "old")
    assert list(results.shifts) == ["jpeg", "blur", "contrast"] and results.shift_sources["blur"] == "preset cpu"


def test_edits_are_objects_in_the_plan_and_their_specs_in_the_records():
    from peanchor.interventions import Hook
    from peanchor.interventions.kinds.pe_zero import PEZero

    shifts = {"jpeg": Shift("jpeg", quality=10)}
    by_object = AnalysisPlan(shifts, interventions=[PEZero(), "head_ablate:layers=1"])
    by_text = AnalysisPlan(shifts, interventions=["pe_zero", "head_ablate:layers=1"])
    assert by_object == by_text and hash(by_object) == hash(by_text) and isinstance(by_object.interventions[0], PEZero)
    assert by_object.to_dict()["interventions"] == ["pe_zero:prefix=zero", "head_ablate:layers=1,heads=all,value=zero"]
    assert AnalysisPlan.from_dict(by_object.to_dict()) == by_object
    hook = Hook("blocks.0.residual", abs)
    assert AnalysisPlan(shifts, interventions=[hook]).interventions == (hook,)  # kept as itself, not turned to text
    with pytest.raises(ConfigError, match="^analysis.interventions=.*: expected Edit objects"):
        AnalysisPlan(shifts, interventions=[3])
