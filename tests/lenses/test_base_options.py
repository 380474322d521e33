"""Lens options: a typed dataclass per lens, held per lens by the analysis plan, set with
``--set analysis.lenses.<lens>.<option>=...`` (analyze and reproduce) or ``lens_options={...}`` (Python), recorded in
analysis.json only for options of a lens's own (SSDC's and the probe's keep their older plan fields)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Literal

import pytest

from peanchor.metrics.bootstrap import DEFAULT_REPLICATES
from peanchor.analysis.plan import AnalysisPlan, parse_plan_items, resolve_plan, split_lens_options
from peanchor.analysis.shifts import Shift
from peanchor.core.errors import ConfigError
from peanchor.lenses import LENSES, Lens, LensContext, NoOptions, get_lens
from peanchor.lenses.position_probe import PositionProbeOptions
from peanchor.lenses.ssdc import SSDCOptions
from peanchor.metrics.position_probe import DEFAULT_HOLDOUT, DEFAULT_RIDGE
from tests.lenses.test_registry import TokenNorm

SHIFTS = {"jpeg": Shift("jpeg", quality=10)}


@dataclass(frozen=True)
class NormOptions:
    order: Literal[1, 2] = 2  # which norm
    scale: float = 1.0


class OptionedNorm(TokenNorm):
    name = "optioned_norm"
    options_type = NormOptions


@pytest.fixture
def optioned():
    LENSES.register(OptionedNorm)
    try:
        yield OptionedNorm
    finally:
        del LENSES[OptionedNorm.name]


def _context(settings: dict) -> LensContext:
    return LensContext(grid=(2, 2), num_prefix=1, depth=2, num_images=4, has_attention_weights=True,
                       settings=settings)  # fmt: skip


def test_the_builtin_options_are_the_plan_fields_and_their_defaults_are_spelled_once():
    assert (SSDCOptions(), PositionProbeOptions()) == (SSDCOptions("mean_similarity", "manhattan", DEFAULT_REPLICATES),
                                                       PositionProbeOptions(DEFAULT_RIDGE, DEFAULT_HOLDOUT))  # fmt: skip
    plan = AnalysisPlan(SHIFTS)
    assert (plan.ssdc_mode, plan.metric, plan.bootstrap, plan.probe_ridge, plan.probe_holdout) == (
        "mean_similarity", "manhattan", DEFAULT_REPLICATES, DEFAULT_RIDGE, DEFAULT_HOLDOUT)  # fmt: skip
    plan = AnalysisPlan(SHIFTS, lens_options={"ssdc": {"mode": "per_image", "bootstrap": 5},
                                              "position_probe": {"ridge": 0.5}})  # fmt: skip
    assert (plan.ssdc_mode, plan.bootstrap, plan.probe_ridge) == ("per_image", 5, 0.5) and plan.lens_options == {}
    assert plan.options("ssdc") == SSDCOptions("per_image", "manhattan", 5)
    lens = get_lens("ssdc")(_context(plan.settings()))
    assert lens.options == SSDCOptions("per_image", "manhattan", 5)  # what the lens reads, typed
    assert get_lens("attention_distance").options_type is NoOptions
    with pytest.raises(ConfigError, match="analysis.ssdc_mode='often': expected one of mean_similarity, per_image"):
        AnalysisPlan(SHIFTS, lens_options={"ssdc": {"mode": "often"}})


def test_set_items_reach_the_fields_and_the_lenses_own_options(optioned):
    items = ["analysis.lenses.ssdc.mode=per_image", "analysis.lenses.optioned_norm.scale=3",
             "analysis.lenses.optioned_norm.order=1", "analysis.lenses=[ssdc, optioned_norm]"]  # fmt: skip
    assert parse_plan_items(items) == {"ssdc_mode": "per_image", "lens_options": {"optioned_norm": {"scale": 3,
                                       "order": 1}}, "lenses": ["ssdc", "optioned_norm"]}  # fmt: skip
    plan = resolve_plan(32, defaults={"lens_options": {"optioned_norm": {"scale": 2.0}}},
                        given={"lens_options": {"optioned_norm": {"order": 2}}}, set_items=items[1:2])  # fmt: skip
    assert plan.lens_options["optioned_norm"] == {"order": 2, "scale": 3.0}  # merged option by option
    assert plan.options("optioned_norm") == NormOptions(order=2, scale=3.0)
    default = AnalysisPlan(SHIFTS)
    assert default.lens_options == {"optioned_norm": {"order": 2, "scale": 1.0}}  # every option, defaults filled in
    assert default == AnalysisPlan(SHIFTS, lens_options={"optioned_norm": {"scale": 1}})  # equal plans, one hash
    assert hash(default) == hash(AnalysisPlan(SHIFTS, lens_options={"optioned_norm": {"scale": 1}}))
    assert default != AnalysisPlan(SHIFTS, lens_options={"optioned_norm": {"scale": 2}})
    assert OptionedNorm(_context(plan.settings())).options == NormOptions(2, 3.0)


@pytest.mark.parametrize("items,message", [
    (["analysis.lenses.optioned_norm.shape=round"], r"unknown option analysis.lenses.optioned_norm.shape; valid: "
     r"analysis.lenses.optioned_norm.order, analysis.lenses.optioned_norm.scale \(did you mean analysis.lenses.optioned_norm.scale\?\)$"),
    (["analysis.lenses.attention_distance.x=1"], "valid: none: it has no options"),
    (["analysis.lenses.optioned_norm.order=3"], r"^analysis.lenses.optioned_norm.order=3: input should be 1 or 2$"),
    (["analysis.lenses.optioned_norm.scale=big"], r"^analysis.lenses.optioned_norm.scale='big': input should be a"),
    (["analysis.lenses.nope.order=1"], r"^unknown lens 'nope'; valid: ssdc, position_probe"),
    (["analysis.lenses=[ssdc]", "analysis.lenses.optioned_norm.order=1"], "lens 'optioned_norm' is not measured"),
    (["analysis.lens_options={}"], r"unknown analysis key 'analysis.lens_options'; .*analysis.lenses.<lens>.<option>"),
])  # fmt: skip
def test_a_bad_option_is_one_line(optioned, items, message):
    with pytest.raises(ConfigError, match=message):
        resolve_plan(32, set_items=items)


def test_the_file_records_the_lenses_own_options_and_reads_them_back(optioned):
    from tests.analysis.test_plan import _result

    plan = AnalysisPlan(SHIFTS, lens_options={"optioned_norm": {"scale": 0.5}, "ssdc": {"bootstrap": 3}})
    record = plan.settings_record("fingerprint", "cpu")
    assert record.lens_options == {"optioned_norm": {"order": 2, "scale": 0.5}} and record.bootstrap == 3
    result = _result(record, {k: s.describe() for k, s in SHIFTS.items()}, None, {})
    assert AnalysisPlan.from_result(result) == plan
    assert AnalysisPlan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan


def test_without_options_of_a_lens_own_the_file_is_as_before():
    record = AnalysisPlan(SHIFTS).settings_record("fingerprint", "cpu")
    assert record.lens_options is None  # omitted from analysis.json: the built-in lenses' files do not change
    from peanchor.results.records import to_json_dict

    assert "lens_options" not in to_json_dict(record)


def test_split_lens_options_takes_a_typed_value_too():
    assert split_lens_options({"ssdc": SSDCOptions(bootstrap=4)}) == (
        {}, {"ssdc_mode": "mean_similarity", "metric": "manhattan", "bootstrap": 4})  # fmt: skip
    assert dataclasses.is_dataclass(get_lens("position_probe").options_type)


def test_a_lens_options_type_must_be_a_dataclass():
    class Untyped(TokenNorm):
        name = "untyped_norm"
        options_type = dict

    with pytest.raises(TypeError, match="options_type must be a dataclass"):
        LENSES.register(Untyped)
    assert issubclass(Untyped, Lens) and "untyped_norm" not in LENSES


def test_each_lens_receives_the_typed_options_the_plan_checked(optioned):
    """typed → typed: the instance pydantic made when the plan was checked is the one the lens is built with (no
    dict in between), and the options that are plan fields come from those fields."""
    import torch

    import peanchor
    from peanchor.analysis.evaluate import measured_lenses

    plan = AnalysisPlan(SHIFTS, lens_options={"optioned_norm": {"scale": 3}, "ssdc": {"mode": "per_image"}})
    typed = plan.options("optioned_norm")
    assert typed == NormOptions(order=2, scale=3.0) and plan.options("optioned_norm") is typed
    model = peanchor.create_model("vit_micro", pe="ape", num_classes=2)
    with torch.no_grad():
        lenses = measured_lenses(model, 4, plan.settings(), options=plan.lens_options_typed())
    assert lenses["optioned_norm"].options is typed
    assert lenses["ssdc"].options == SSDCOptions("per_image", "manhattan", DEFAULT_REPLICATES)
    replaced = dataclasses.replace(plan, ssdc_mode="mean_similarity")  # a plan field changed: its option follows
    assert replaced.options("ssdc").mode == "mean_similarity" and replaced.options("optioned_norm") == typed
