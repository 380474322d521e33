"""The analysis settings are declared once (``peanchor.settings.plan.PlanSettings``): ``peanchor.analyze``'s
keywords, ``peanchor analyze``'s flags, ``analysis.json``'s ``settings`` record and the docs' table are made from
those fields, so that a new field reaches all of them and none can drift."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import peanchor
import peanchor.settings.plan as plan_settings
from peanchor.analysis.plan import SETTINGS_KEYS, AnalysisPlan, resolve_plan
from peanchor.cli import build_parser
from peanchor.commands.analyze import given_settings
from peanchor.core.errors import ConfigError
from peanchor.settings.plan import Flag, PlanSettings, check_setting_names, setting, setting_fields, settings_table
from peanchor.results.records import AnalysisSettings

ROOT = Path(__file__).resolve().parents[2]
NOT_SETTINGS = {"model", "data", "labels", "plan", "shifts", "preset", "device", "progress", "mean", "std"}


def _analyze_parser():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices["analyze"]


def test_the_docs_table_is_the_declarations():
    text = (ROOT / "docs" / "python.md").read_text(encoding="utf-8")
    begin = text.index("-->\n", text.index("<!-- settings:begin")) + len("-->\n")
    assert text[begin : text.index("<!-- settings:end -->")] == settings_table()
    rows = [line.split("|")[1].strip(" `") for line in settings_table().splitlines()[2:]]
    assert rows == list(SETTINGS_KEYS) == [f.name for f in dataclasses.fields(PlanSettings)]


def test_analyze_takes_the_settings_as_keywords_and_its_docstring_names_them():
    parameters = inspect.signature(peanchor.analyze).parameters
    explicit = {name for name, p in parameters.items() if p.kind is not inspect.Parameter.VAR_KEYWORD}
    assert explicit == NOT_SETTINGS and not explicit & set(SETTINGS_KEYS)
    assert parameters["settings"].kind is inspect.Parameter.VAR_KEYWORD
    doc = inspect.getdoc(peanchor.analyze) or ""
    paragraph = doc[doc.index("**settings:") : doc.index("Returns:")]
    listed = paragraph[paragraph.index("PlanSettings`):") : paragraph.index("An unknown name")]
    named = re.findall(r"``(\w+)``", listed)
    assert named == list(SETTINGS_KEYS)


def test_an_unknown_keyword_is_one_line_with_the_closest_setting():
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(None, None, rpi_draw=2)  # checked before the model or the data are looked at
    message = str(e.value)
    assert message.startswith("peanchor.analyze(): unknown setting 'rpi_draw'; valid: ")
    assert message.endswith(", ".join(SETTINGS_KEYS) + " (did you mean rpi_draws?)") and "\n" not in message
    with pytest.raises(ConfigError, match=r"unknown setting 'quality'; valid: [a-z_, ]+$"):  # nothing close
        check_setting_names(["alphas", "quality"])
    check_setting_names(SETTINGS_KEYS)


def test_every_declared_flag_is_an_option_of_analyze_and_sets_its_setting():
    options = {o: a for a in _analyze_parser()._actions for o in a.option_strings}
    for s in setting_fields():
        for flag in s.flags:
            assert flag.name in options and options[flag.name].help, (s.name, flag.name)
    args = _analyze_parser().parse_args([
        "RUN", "--alphas", "1,0.5", "--rpi-draws", "3", "--seed", "2", "--batch-size", "7", "--images", "5",
        "--severities", "--per-image", "--euclidean", "--bootstrap", "4", "--rpi-mode", "per_call", "--probe-ridge", "0.1", "--probe-holdout",
        "0.25", "--intervention", "pe_zero", "--intervention", "head_ablate:layers=1"])  # fmt: skip
    assert given_settings(args) == {
        "alphas": [1.0, 0.5], "rpi_draws": 3, "seed": 2, "batch_size": 7, "max_images": 5, "severities": True,
        "ssdc_mode": "per_image", "metric": "euclidean", "bootstrap": 4, "probe_ridge": 0.1, "probe_holdout": 0.25,
        "lenses": None, "interventions": ["pe_zero", "head_ablate:layers=1"], "lens_options": None, "sweeps": None,
        "rpi_mode": "per_call", "bootstrap_groups": None, "resolutions": None}  # fmt: skip
    plan = resolve_plan(16, given=given_settings(args))
    assert (plan.alphas, plan.ssdc_mode, plan.max_images) == ((1.0, 0.5), "per_image", 5)
    assert tuple(e.spec for e in plan.interventions) == ("pe_zero:prefix=zero", "head_ablate:layers=1,heads=all,value=zero")
    nothing = given_settings(_analyze_parser().parse_args(["RUN"]))
    assert set(nothing) == set(SETTINGS_KEYS) and set(nothing.values()) == {None}
    both = given_settings(_analyze_parser().parse_args(["RUN", "--no-alpha", "--alphas", "1,0"]))
    assert both["alphas"] == ()  # the switch declared last wins, wherever it stands


def test_the_file_record_is_the_settings_as_json_types():
    recorded = {f.name: f for f in dataclasses.fields(AnalysisSettings)}
    assert list(recorded) == [*SETTINGS_KEYS, "evalset", "device"]
    for s in setting_fields():
        f = recorded[s.name]
        optional = f.default is None and f.metadata.get("omit_if_none")
        assert bool(optional) == s.optional_in_files, s.name  # absent from older files: read as None
        assert "tuple" not in str(f.type) and "Mapping" not in str(f.type), (s.name, f.type)  # JSON: lists, dicts
    plan = AnalysisPlan.from_dict({"shifts": {"jpeg": {"kind": "jpeg", "quality": 10}}, "interventions": ["pe_zero"]})
    record = plan.settings_record("fingerprint", "cpu")
    assert record.alphas == list(plan.alphas) and record.interventions == ["pe_zero:prefix=zero"]


def test_a_new_field_becomes_a_keyword_a_flag_and_a_recorded_setting(monkeypatch):
    """How a new setting is declared (h-sweep's ``sweeps``): one field, with its help and flag."""

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class WithSweeps(PlanSettings):
        sweeps: tuple[str, ...] = setting((), "the intervention sweeps (docs/interventions.md)",
                                          flags=(Flag("--sweep", "SPEC", repeat=True),), recorded="optional")

    monkeypatch.setattr(plan_settings, "PlanSettings", WithSweeps)
    check_setting_names(["sweeps", "rpi_draws"])  # a keyword of analyze now
    with pytest.raises(ConfigError, match=r"'sweep'; valid: .* \(did you mean sweeps\?\)$"):
        check_setting_names(["sweep"])
    parser = _analyze_parser()
    assert "--sweep SPEC" in parser.format_help() and "the intervention sweeps" in parser.format_help()
    assert given_settings(parser.parse_args(["RUN", "--sweep", "a", "--sweep", "b"]))["sweeps"] == ["a", "b"]
    assert "`sweeps` | `--sweep` | none | the intervention sweeps" in settings_table()
    from peanchor.results.records import _settings_record

    record = {f.name: f.type for f in dataclasses.fields(_settings_record())}
    assert record["sweeps"] == list[str] | None
