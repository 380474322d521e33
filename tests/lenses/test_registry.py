"""A lens is a plug-in: one class, registered, is measured, written, read back, logged, summarised and reported
without touching anything else. The registry itself refuses what it cannot hold."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import resolve_plan
from peanchor.core.errors import ConfigError
from peanchor.core.fileio import Number
from peanchor.lenses import LENSES, Lens, LensBatch, get_lens, lens_names, register_lens
from peanchor.results.records import analysis_rows, read_analysis

from tests.helpers.builders import tiny_info

INFO = tiny_info()


@dataclass(kw_only=True)
class NormLayers:
    normal: list[Number]
    rpi: list[Number]


class TokenNorm(Lens):
    """The mean L2 norm of the patch tokens per layer: a lens a researcher could write in a few minutes."""

    name = "token_norm"
    title = "token norm"
    description = "the mean L2 norm of a patch token"
    record_type = NormLayers
    ylabel = "mean norm"
    stat = "mean"
    stat_label = "token norm"
    order = 50
    zero_line = False

    def accumulator(self) -> list[Any]:
        return [0.0, 0]  # summed norms per layer, tokens

    def update(self, state: list[Any], batch: LensBatch) -> None:
        norms = batch.tokens.double().norm(dim=-1)  # (B, L, N)
        state[0] = state[0] + norms.sum(dim=(0, 2))
        state[1] += norms.shape[0] * norms.shape[2]

    def record(self, normal: list[Any], rpi: Sequence[list[Any]]) -> NormLayers:
        mean = [(s[0] / s[1]).tolist() for s in rpi]
        return NormLayers(normal=(normal[0] / normal[1]).tolist(), rpi=[sum(v) / len(v) for v in zip(*mean)])

    @classmethod
    def layers(cls, record: NormLayers, mode: str) -> list[float]:
        return list(getattr(record, mode))


@pytest.fixture
def token_norm():
    register_lens(TokenNorm)
    try:
        yield TokenNorm
    finally:
        LENSES.pop(TokenNorm.name)


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    images = torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    return EvalSet.from_tensors(images, torch.arange(16) % 3, INFO)


def test_a_registered_lens_goes_everywhere_by_itself(token_norm, evalset, micro, tmp_path):
    from peanchor.commands.analyze import summary_text
    from peanchor.report.lenses import lens_table
    from peanchor.results.records import CellId, ModelResult, Results, TrainSummary
    from peanchor.core.tracking import log_analysis

    assert lens_names()[-1] == "token_norm"  # its order (50) puts it after the built-ins
    model = micro("ape", num_classes=3)
    plan = resolve_plan(16, given={"alphas": (), "batch_size": 8, "rpi_draws": 2})
    assert "token_norm" in plan.lenses  # a plan measures every registered lens unless told otherwise
    r = evaluate_model(model, evalset, plan, info=INFO, device="cpu", progress=False)
    record = r.lens("token_norm")
    assert isinstance(record, NormLayers) and len(record.normal) == len(record.rpi) == model.depth
    assert all(v > 0 and math.isfinite(v) for v in record.normal + record.rpi)
    assert read_analysis(r.save(tmp_path)).lens("token_norm") == record  # written and read back, typed
    assert [row["layer"] for row in analysis_rows(r) if row["metric"] == "token_norm_rpi"] == [0, 1]
    assert "token norm normal" in summary_text(r)

    class Log:  # TensorBoard's writer, as far as log_analysis needs it
        def __init__(self) -> None:
            self.tags: list[str] = []

        def scalar(self, tag: str, value: Any, step: int) -> None:
            self.tags.append(tag)

        def scalars(self, prefix: str, values: Any, step: int) -> None:
            self.tags += [f"{prefix}/{k}" for k in values]

        def text(self, tag: str, text: str) -> None:
            pass

    log = Log()
    log_analysis(log, r)  # type: ignore[arg-type]
    assert {"token_norm/normal", "token_norm/rpi"} <= set(log.tags)
    cell = CellId(name="ape-s0", condition="ape", pe="ape", rpt=False, seed=0)
    table = lens_table(Results(models=[ModelResult.from_analysis(r, cell, TrainSummary(), "x")]))
    assert table is not None and table.header[-2:] == ["token norm", "token norm (RPI)"]
    skipped = evaluate_model(model, evalset, resolve_plan(16, given={"alphas": (), "lenses": ["ssdc"]}), info=INFO,
                             device="cpu", progress=False)  # fmt: skip
    assert list(skipped.lenses) == ["ssdc"]  # not asked for: not measured


def test_the_registry_refuses_what_it_cannot_hold():
    class Nameless(TokenNorm):
        name = "not a name"

    class Twin(TokenNorm):
        name = "ssdc"

    with pytest.raises(ConfigError, match="not an identifier"):
        register_lens(Nameless)
    with pytest.raises(ValueError, match="already registered"):
        register_lens(Twin)
    with pytest.raises(ConfigError, match="unknown lens 'nope'; valid: ssdc, position_probe, attention_distance"):
        get_lens("nope")
    assert get_lens("ssdc").required and [lens.order for lens in LENSES.values()] == sorted(
        lens.order for lens in LENSES.values())
