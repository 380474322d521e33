"""Every JSON file peanchor writes is strict JSON: an undefined number (NaN, ±inf) is ``null``, and the result files
read it back as NaN. Checked end to end on a model at 0 clean accuracy (its fragility is 0/0), through analysis.json,
results.json and the report."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch

from peanchor.core import fileio
from peanchor.analysis.shifts import Shift
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import AnalysisPlan
from peanchor.study import write_results_and_report
from peanchor.results.records import read_analysis, read_results, write_analysis

from tests.helpers.builders import tiny_info

INFO = tiny_info(["a", "b", "c", "d"], "strict")


def _refuse(constant: str) -> float:
    raise AssertionError(f"not strict JSON: {constant}")


def strict_load(path: Path) -> object:
    return json.loads(path.read_text(), parse_constant=_refuse)


def test_write_json_writes_undefined_numbers_as_null(tmp_path):
    path = tmp_path / "x.json"
    fileio.write_json(path, {"fs": [float("nan"), 0.25], "up": float("inf"), "down": -float("inf"), "n": 3})
    assert strict_load(path) == {"fs": [None, 0.25], "up": None, "down": None, "n": 3}


@pytest.fixture(scope="module")
def never_right(micro) -> torch.nn.Module:
    """A vit_micro whose head always says class 3, evaluated on images of classes 0-2 only: clean accuracy 0."""
    model = micro("ape", num_classes=4)
    with torch.no_grad():
        model.head.weight.zero_()
        model.head.bias.copy_(torch.tensor([0.0, 0.0, 0.0, 10.0]))
    return model


def test_a_model_at_zero_accuracy_round_trips_as_null_and_nan(never_right, tmp_path):
    g = torch.Generator().manual_seed(0)
    images = (torch.rand(24, 3, 16, 16, generator=g) * 255).to(torch.uint8)  # (24, 3, 16, 16)
    labels = torch.arange(24) % 3  # never class 3
    evalset = EvalSet.from_tensors(images, labels, INFO)
    shifts = {"blur": Shift("blur", kernel_size=3, sigma=1.0)}
    result = evaluate_model(never_right, evalset, AnalysisPlan(shifts, alphas=(1.0, 0.5), batch_size=8), info=INFO,
                            device="cpu", progress=False)  # fmt: skip
    assert result.clean_acc == 0.0 and math.isnan(result.fragility["blur"])  # FS = 1 - 0/0: undefined

    out = tmp_path / "grid"
    run = out / "runs" / "ape-s0"
    write_analysis(result, run / "analysis")
    fileio.write_json(run / "summary.json", {"condition": "ape", "seed": 0, "preset": "smoke", "val_acc": 0.0,
                                             "data": "strict", "img_size": 16, "loss": float("nan")})  # fmt: skip
    doc = strict_load(run / "analysis" / "analysis.json")
    assert doc["fragility"]["blur"] is None and doc["clean_acc"] == 0.0  # type: ignore[index]
    again = read_analysis(run / "analysis")
    assert math.isnan(again.fragility["blur"]) and again.acc == result.acc
    assert all(math.isnan(p.fragility["blur"]) for p in again.alpha_sweep if p.clean_acc == 0.0)

    results, wrote = write_results_and_report(out)
    assert wrote and [m.name for m in results.models] == ["ape-s0"]
    doc = strict_load(out / "results.json")
    assert doc["models"][0]["fragility"]["blur"] is None  # type: ignore[index]
    back = read_results(out)
    assert math.isnan(back.models[0].fragility["blur"]) and back.models[0].clean_acc == 0.0
    for path in out.rglob("*.json"):  # every JSON file of the grid, the summary with its NaN loss included
        strict_load(path)
    report = (out / "report.md").read_text()
    assert "—" in report and not re.search(r"\bnan\b", report, re.IGNORECASE)
