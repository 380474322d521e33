"""The analysis plan: one checked value, read and written exactly, resolved in three layers (defaults, then what
is given, then ``--set analysis.*``)."""

from __future__ import annotations

import dataclasses
import json
import math

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
from peanchor.errors import ConfigError
from peanchor.results import AnalysisResult, AnalysisSettings, ModelInfo, SSDCLayers

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
    assert (p.rpi_draws, p.seed, p.batch_size, p.max_images, p.severities, p.bootstrap) == (1, 0, 256, None, False, 0)
    assert (p.ssdc_mode, p.metric, p.probe_ridge, p.probe_holdout) == ("mean_similarity", "manhattan", 1e-3, 0.5)
    assert p.lenses == LENS_NAMES == ("ssdc", "attention_distance", "position_probe") and p.shift_sources == {}


def test_values_are_normalised():
    p = plan(alphas=[1, 0.5, 1, 0], lenses=["position_probe", "ssdc"], probe_ridge=1, probe_holdout=0.25)
    assert p.alphas == (1.0, 0.5, 0.0) and all(type(a) is float for a in p.alphas)
    assert p.lenses == ("ssdc", "position_probe") and type(p.probe_ridge) is float
    assert plan(alphas=0.5).alphas == (0.5,) and plan(alphas=()).alphas == ()


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
        clean_acc=0.5, rpi_acc=0.4, ssdc=SSDCLayers(normal=[0.6, 0.5], rpi=[0.1, 0.3], rpi_std=[0.0, 0.0]),
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
    """A schema-2 file written before settings recorded max_images and lenses: all three lenses, and the subset
    size reproduce kept in the source."""
    old = AnalysisSettings(alphas=[1.0], rpi_draws=1, seed=0, ssdc_mode="mean_similarity", metric="manhattan",
                           bootstrap=0, severities=False, batch_size=25, evalset="x", device="cpu", probe_ridge=1e-3,
                           probe_holdout=0.5)  # fmt: skip
    result = _result(old, {"jpeg": {"kind": "jpeg", "quality": 10}}, None, {"max_images": 100})
    p = AnalysisPlan.from_result(result)
    assert p.lenses == LENS_NAMES and p.max_images == 100 and p.batch_size == 25 and p.shift_sources == {}


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
    assert split_plan_items(["a.b=1", "analysis.seed=2", " analysis.metric=euclidean"]) == (
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
