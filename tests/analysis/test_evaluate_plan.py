"""The plan of an analysis's passes (``peanchor.analysis.evaluate.PassPlan``): every pass the suite runs, in the order
it runs them, each distinct pass once, each carrying the :class:`Shift` it reads from the plan to the record."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import PassPlan, evaluate_model
from peanchor.analysis.passes import PassSpec
from peanchor.analysis.plan import AnalysisPlan
from peanchor.analysis.shifts import Shift, severity_table
from peanchor.data import DataInfo

INFO = DataInfo(num_classes=3, img_size=16, mean=(0.5,) * 3, std=(0.25,) * 3, name="tensors")
JPEG = severity_table(16, ["jpeg"])["jpeg"]  # five qualities
BLUR = Shift("blur", sigma=1.0)


def passes_of(shifts: dict[str, Shift], alphas=(1.0, 0.5, 0.0), draws: int = 2, severities: bool = True) -> PassPlan:
    applied = AnalysisPlan(shifts, alphas=alphas, rpi_draws=draws, severities=severities)
    kinds = list(dict.fromkeys(s.kind for s in shifts.values()))
    return PassPlan.of(applied, severity_table(16, kinds) if severities else {})


def test_the_passes_come_in_order_and_each_distinct_pass_once():
    plan = passes_of({"jpeg": JPEG[2], "blur": BLUR})  # the main JPEG is severity 3 of its table
    blur = severity_table(16, ["blur"])["blur"]
    clean, rpi = PassSpec(None, 1.0, "all", None), [PassSpec(None, 1.0, "all", k) for k in range(2)]
    at_one = [PassSpec(s, 1.0, "none", None) for s in (JPEG[2], BLUR, *JPEG[:2], *JPEG[3:], *blur)]
    sweep = [p for a in (0.5, 0.0) for p in (PassSpec(None, a, "none", None), PassSpec(JPEG[2], a, "none", None),
                                             PassSpec(BLUR, a, "none", None),
                                             *(PassSpec(None, a, "first2", k) for k in range(2)))]  # fmt: skip
    assert plan.passes == [clean, *rpi, *at_one, *sweep]
    assert plan.severities["jpeg"][2] == plan.shifted["jpeg"]  # the same pass, run once
    assert sorted(plan.sweep) == [0.0, 0.5]  # α = 1 is the main result, not a pass of the sweep
    assert plan.sweep[0.5].rpi == tuple(PassSpec(None, 0.5, "first2", k) for k in range(2))
    # the shifts the passes read: every distinct one, once
    assert plan.shifts == [JPEG[2], BLUR, *JPEG[:2], *JPEG[3:], *blur]


def test_without_severities_or_a_sweep_only_the_main_passes_remain():
    plan = passes_of({"blur": BLUR}, alphas=(1.0,), draws=3, severities=False)
    assert plan.passes == [PassSpec(None, 1.0, "all", None), *(PassSpec(None, 1.0, "all", k) for k in range(3)),
                           PassSpec(BLUR, 1.0, "none", None)]  # fmt: skip
    assert plan.severities == {} and plan.sweep == {}


def test_a_pass_carries_its_shift_as_a_shift():
    plan = passes_of({"jpeg": Shift("jpeg", quality=10)}, severities=False)
    spec = plan.shifted["jpeg"]
    assert isinstance(spec.shift, Shift) and spec.shift == Shift("jpeg", quality=10)
    assert spec.label == "jpeg_q10, alpha=1" and plan.sweep[0.5].shifted["jpeg"].label == "jpeg_q10, alpha=0.5"
    assert PassSpec(None, 0.5, "first2", 1).label == "clean, alpha=0.5, rpi#1, probes 0-1"
    assert {spec: 1}[PassSpec(Shift("jpeg", quality=10), 1.0, "none", None)] == 1  # frozen and hashable


def test_the_result_counts_the_planned_passes(micro):
    g = torch.Generator().manual_seed(0)
    images, labels = torch.randint(0, 256, (6, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(6) % 3
    evalset = EvalSet.from_tensors(images, labels, INFO)
    shifts = {"jpeg": JPEG[2], "blur": BLUR}
    applied = AnalysisPlan(shifts, alphas=(1.0, 0.5), rpi_draws=2, batch_size=4, severities=True)
    r = evaluate_model(micro("ape", num_classes=3), evalset, applied, device="cpu", progress=False)
    planned = passes_of(shifts, alphas=(1.0, 0.5), draws=2)
    assert r.forward_passes == len(planned.passes) and r.passes["probe_rpi"] == 0  # RPI per image feeds the probe
    per_call = evaluate_model(micro("ape", num_classes=3), evalset, dataclasses.replace(applied, rpi_mode="per_call"),
                              device="cpu", progress=False)  # fmt: skip
    assert per_call.forward_passes == len(planned.passes) + 2  # the probe's own pass under each RPI draw
    assert r.passes["truncated"] == sum(p.probes == "first2" for p in planned.passes) == 2
    assert r.severity_shifts == {k: [p.shift.describe() for p in group] for k, group in planned.severities.items()}
    assert r.shifts == {name: s.describe() for name, s in shifts.items()}


def test_a_plan_that_is_not_an_analysis_plan_is_refused(micro):
    from peanchor.core.errors import ConfigError

    evalset = EvalSet.from_tensors(torch.zeros(2, 3, 16, 16, dtype=torch.uint8), torch.tensor([0, 1]), INFO)
    with pytest.raises(ConfigError, match="plan must be an AnalysisPlan, got a dict"):
        evaluate_model(micro("ape"), evalset, {"alphas": ()}, device="cpu", progress=False)  # type: ignore[arg-type]
