"""The Lens API the analysis reads a lens through (``peanchor.lenses.base``): a lens says whether it is measured in
the truncated passes of the α sweep (``truncated``), gives one pass's per-layer values (``curve``) and their mean
over RPI draws (``rpi_curve``); SSDC, which ΔSSDC is made of, is such a lens, read like any other."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import measured_lenses
from peanchor.analysis.passes import PassRunner, PassSpec
from peanchor.data import DataInfo
from peanchor.lenses import Lens, LensBatch, LensContext, mean_and_std
from peanchor.metrics import SSDCAccumulator

INFO = DataInfo(num_classes=3, img_size=16, mean=(0.5,) * 3, std=(0.25,) * 3, name="tensors")


@dataclass(kw_only=True)
class MeanLayers:
    normal: list[float]
    rpi: list[float]


class TokenMean(Lens):
    """The mean of every patch token's channels, per layer; measured in the truncated passes too."""

    name = "token_mean"
    title = "token mean"
    description = "the mean channel value of a patch token"
    record_type = MeanLayers
    ylabel = "mean"
    stat_label = "token mean"
    truncated = True

    def accumulator(self) -> dict[str, Any]:
        return {"sum": 0.0, "count": 0, "layers": set()}

    def update(self, state: dict[str, Any], batch: LensBatch) -> None:
        state["sum"] = state["sum"] + batch.tokens.double().sum(dim=(0, 2, 3))  # (L,)
        state["count"] += batch.tokens[:, 0].numel()
        state["layers"].add(batch.tokens.shape[1])

    def curve(self, state: dict[str, Any]) -> list[float]:
        return (state["sum"] / state["count"]).tolist()

    def record(self, normal: dict[str, Any], rpi: Sequence[dict[str, Any]]) -> MeanLayers:
        return MeanLayers(normal=self.curve(normal), rpi=self.rpi_curve(rpi))

    @classmethod
    def layers(cls, record: MeanLayers, mode: str) -> list[float]:
        return list(getattr(record, mode))


class InFullPassesOnly(TokenMean):
    name = "in_full_passes_only"
    truncated = False


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    g = torch.Generator().manual_seed(2)
    images = torch.randint(0, 256, (10, 3, 16, 16), dtype=torch.uint8, generator=g)
    return EvalSet.from_tensors(images, torch.arange(10) % 3, INFO)


def runner_for(model, evalset: EvalSet, lenses: dict[str, Lens]) -> PassRunner:
    return PassRunner(model, evalset, INFO.mean, INFO.std, batch_size=4, device=torch.device("cpu"), seed=0,
                      lenses=lenses, bar=None)  # fmt: skip


def test_a_truncated_pass_feeds_the_lenses_that_say_so(evalset, micro):
    model = micro("rope", num_classes=3)
    every = measured_lenses(model, len(evalset), {"seed": 0}, chosen=())  # SSDC alone
    context = every["ssdc"].context
    lenses = {**every, "token_mean": TokenMean(context), "in_full_passes_only": InFullPassesOnly(context)}
    runner = runner_for(model, evalset, lenses)
    full = runner.run(PassSpec(None, 1.0, "all", None))
    assert set(full.states) == set(lenses) and full.states["token_mean"]["layers"] == {model.depth}
    first2 = runner.run(PassSpec(None, 0.5, "first2", 0))
    assert set(first2.states) == {"ssdc", "token_mean"} and first2.states["token_mean"]["layers"] == {2}
    # the truncated pass's first two layers are the full pass's at the same α and permutation
    again = runner.run(PassSpec(None, 0.5, "all", 0))
    assert lenses["token_mean"].curve(first2.states["token_mean"]) == lenses["token_mean"].curve(
        again.states["token_mean"])[:2]  # fmt: skip


def test_ssdc_is_read_through_its_curve(evalset, micro):
    from peanchor.data import normalize

    model = micro("ape", num_classes=3)
    ssdc = measured_lenses(model, len(evalset), {"seed": 0}, chosen=())["ssdc"]
    runner = runner_for(model, evalset, {"ssdc": ssdc})
    clean = runner.run(PassSpec(None, 1.0, "all", None)).states["ssdc"]
    reference = SSDCAccumulator(model.grid)  # the metric on the model's own tokens, batch by batch
    with torch.inference_mode():
        for start in range(0, len(evalset), 4):
            reference.update(model.spatial_tokens(normalize(evalset.images[start : start + 4], INFO.mean, INFO.std)))
    np.testing.assert_allclose(ssdc.curve(clean), reference.compute().numpy(), rtol=0, atol=1e-12)
    draws = [runner.run(PassSpec(None, 0.5, "first2", k)).states["ssdc"] for k in range(3)]
    curves = [ssdc.curve(state) for state in draws]
    assert len(curves[0]) == 2 and curves[0] != curves[1]  # layers 0 and 1; the draws differ
    np.testing.assert_allclose(ssdc.rpi_curve(draws), [statistics.fmean(layer) for layer in zip(*curves)], rtol=0,
                               atol=1e-15)  # fmt: skip
    record = ssdc.record(clean, draws)
    assert record.rpi == ssdc.rpi_curve(draws) and record.normal == ssdc.curve(clean)  # one reading, to the bit


def test_a_lens_offers_no_curve_unless_it_has_one():
    class Plain(InFullPassesOnly):
        name = "plain"
        curve = Lens.curve  # type: ignore[assignment]

    lens = Plain(LensContext(grid=(2, 2), num_prefix=1, depth=2, num_images=4, has_attention_weights=False,
                             settings={}))  # fmt: skip
    with pytest.raises(NotImplementedError, match="the plain lens offers no per-layer curve"):
        lens.curve(lens.accumulator())


def test_mean_and_std_over_draws_are_the_sample_statistics():
    draws = [[0.1, 0.5, -0.2], [0.3, 0.1, 0.0], [0.2, 0.4, 0.7]]
    mean, std = mean_and_std(draws)
    np.testing.assert_allclose(mean, [statistics.fmean(v) for v in zip(*draws)], rtol=0, atol=1e-15)
    np.testing.assert_allclose(std, [statistics.stdev(v) for v in zip(*draws)], rtol=0, atol=1e-15)
    assert mean_and_std([[0.25, 0.5]]) == ([0.25, 0.5], [0.0, 0.0])  # one draw: no spread
