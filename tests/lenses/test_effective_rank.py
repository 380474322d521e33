"""The effective-rank lens: against numpy's SVD, on matrices whose answer is known, under RPI, and through the files,
the CSV, TensorBoard's scalars, the summary and the report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model, measured_lenses
from peanchor.data import normalize
from peanchor.interventions import NO_INTERVENTION
from peanchor.lenses import LENSES, LensBatch
from peanchor.lenses.effective_rank import EffectiveRankLayers, effective_rank
from peanchor.results.records import analysis_rows, read_analysis

from tests.helpers import builders
from tests.helpers.builders import tiny_info

from tests.helpers.paths import TEST_DATA

INFO = tiny_info()


def numpy_effective_rank(x: np.ndarray) -> float:
    """The definition, written out on numpy's SVD: exp of the entropy of the singular values divided by their sum."""
    sigma = np.linalg.svd(np.asarray(x, dtype=np.float64), compute_uv=False)
    p = sigma / sigma.sum()
    p = p[p > 0]
    return float(np.exp(-(p * np.log(p)).sum()))


def plan(**given):
    """The analysis of these tests: the 16 px resolution rule's shifts, no α sweep, batches of 8."""
    return builders.plan(**{"alphas": (), "batch_size": 8, **given})


@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (24, 3, 16, 16), dtype=torch.uint8, generator=g)
    return EvalSet.from_tensors(images, torch.arange(24) % 3, INFO)


@pytest.mark.parametrize("shape", [(16, 8), (8, 16), (12, 12)])
def test_it_is_the_entropy_of_numpys_singular_values(shape):
    x = torch.randn(5, 3, *shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = effective_rank(x)
    want = [[numpy_effective_rank(x[b, layer].numpy()) for layer in range(3)] for b in range(5)]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=0)


def test_known_answers():
    eye = torch.zeros(10, 6, dtype=torch.float64)
    eye[:6] = torch.eye(6) * 3.0  # six equal singular values
    line = torch.outer(torch.arange(1.0, 11.0, dtype=torch.float64), torch.ones(6, dtype=torch.float64))  # rank 1
    two = torch.zeros(10, 6, dtype=torch.float64)
    two[0, 0], two[1, 1] = 3.0, 1.0  # p = (3/4, 1/4)
    got = effective_rank(torch.stack([eye, line, two, torch.zeros(10, 6, dtype=torch.float64)]))
    assert got[0].item() == pytest.approx(6.0, rel=1e-12) and got[1].item() == pytest.approx(1.0, rel=1e-9)
    assert got[2].item() == pytest.approx(math.exp(-(0.75 * math.log(0.75) + 0.25 * math.log(0.25))), rel=1e-12)
    assert math.isnan(got[3].item())  # no singular value to normalise: no effective rank
    scaled = effective_rank(torch.stack([eye * 1e-3, line * 7.0]))
    np.testing.assert_allclose(scaled.numpy(), got[:2].numpy(), rtol=1e-9)  # invariant to the tokens' scale


def test_the_lens_averages_over_images_whatever_the_batches(micro):
    model = micro("ape", num_classes=3)
    lens = measured_lenses(model, 7, {})["effective_rank"]
    tokens = torch.randn(7, 2, 16, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    tokens[3, 1] = 0.0  # an image without an effective rank at layer 1 is left out of that layer's mean
    state = lens.accumulator()
    for start, stop in ((0, 2), (2, 5), (5, 7)):
        lens.update(state, LensBatch(tokens[start:stop], start, None))
    record = lens.record(state, [state])
    per_image = np.array([[numpy_effective_rank(tokens[b, layer].numpy()) if (b, layer) != (3, 1) else np.nan
                           for layer in range(2)] for b in range(7)])  # fmt: skip
    np.testing.assert_allclose(record.normal, np.nanmean(per_image, axis=0), rtol=1e-12)
    assert record.rpi == record.normal and record.max_rank == 8


def test_an_analysis_measures_it_in_order_and_under_rpi(evalset, micro, tmp_path):
    model = micro("ape", num_classes=3)
    r = evaluate_model(model, evalset, plan(rpi_draws=2), info=INFO, device="cpu", progress=False)
    record = r.lens("effective_rank")
    assert isinstance(record, EffectiveRankLayers) and record.max_rank == 16  # 4 x 4 patches of width 32
    # In order: numpy's SVD of the tokens of the same batches.
    x = normalize(evalset.images, INFO.mean, INFO.std)
    with torch.inference_mode():
        tokens = torch.cat([model.forward_intermediates(x[i : i + 8], NO_INTERVENTION, head=False).tokens
                            for i in range(0, len(x), 8)])  # fmt: skip
    want = [np.mean([numpy_effective_rank(tokens[b, layer].numpy()) for b in range(len(x))]) for layer in range(2)]
    np.testing.assert_allclose(record.normal, want, rtol=1e-9)
    assert all(1.0 <= v <= 16 for v in record.normal + record.rpi)
    assert record.rpi != record.normal  # with an APE, RPI changes what the blocks compute
    # The files, the CSV, TensorBoard's scalars and the summary.
    back = read_analysis(r.save(tmp_path)).lens("effective_rank")
    assert back == record
    rows = [row for row in analysis_rows(r) if row["metric"].startswith("effective_rank")]
    assert [(row["metric"], row["layer"]) for row in rows] == [
        ("effective_rank_normal", 0), ("effective_rank_normal", 1), ("effective_rank_rpi", 0), ("effective_rank_rpi", 1)]
    assert [v for _, v, _ in LENSES["effective_rank"].scalars(record)] == record.normal + record.rpi
    from peanchor.commands.analyze import summary_text

    assert "effective rank normal" in summary_text(r) and "effective rank RPI" in summary_text(r)


def test_without_a_pe_rpi_only_reorders_the_tokens(evalset, micro):
    """A model without a PE is permutation-equivariant: under RPI every image's tokens are its tokens in order,
    permuted, and the singular values of a matrix do not depend on the order of its rows."""
    r = evaluate_model(micro("none", num_classes=3), evalset, plan(), info=INFO, device="cpu", progress=False)
    record = r.lens("effective_rank")
    np.testing.assert_allclose(record.rpi, record.normal, rtol=1e-5)


def test_the_report_shows_it(evalset, micro):
    from peanchor.report.lenses import lens_sentences, lens_table
    from peanchor.results.records import CellId, ModelResult, Results, TrainSummary

    models = []
    for i, pe in enumerate(("none", "ape")):
        r = evaluate_model(micro(pe, num_classes=3), evalset, plan(), info=INFO, device="cpu", progress=False)
        cell = CellId(name=f"{pe}-s0", condition=pe, pe=pe, rpt=False, seed=0)
        models.append(ModelResult.from_analysis(r, cell, TrainSummary(), f"runs/{pe}-s0"))
    results = Results(models=models, conditions=["none", "ape"], seeds=[0])
    table = lens_table(results)
    assert table is not None and table.header[-2:] == ["eff. rank", "eff. rank (RPI)"]
    means = [np.mean(m.lens("effective_rank").normal) for m in models]
    assert [row[-2] for row in table.rows] == [f"{v:.3f}" for v in means]
    assert any("effective rank" in s for s in lens_sentences(results))


def test_an_analysis_written_before_the_lens_existed_reads_and_rewrites_unchanged(tmp_path):
    """tests/data/analysis-v2-three-lenses.json was written by the peanchor before lenses were plug-ins (schema 2,
    smoke preset, ape-s0): it reads without an effective rank, and written back (schema 3: the records under
    ``lenses``) it holds the same measurements."""
    import json

    from peanchor.results.records import write_analysis

    path = TEST_DATA / "analysis-v2-three-lenses.json"
    doc = json.loads(path.read_text())
    result = read_analysis(path)
    assert result.lens("effective_rank") is None and result.ssdc.rpi == doc["ssdc"]["rpi"]
    assert result.position_probe.row.normal == doc["position_probe"]["row"]["normal"]
    assert result.attention_distance.manhattan.rpi == doc["attention_distance"]["manhattan"]["rpi"]
    again = json.loads(write_analysis(result, tmp_path).read_text())
    lenses = ("ssdc", "position_probe", "attention_distance")
    assert again["lenses"] == {name: doc[name] for name in lenses} and again["schema_version"] == 3
    assert {k: v for k, v in again.items() if k not in ("lenses", "schema_version")} == {
        k: v for k, v in doc.items() if k not in (*lenses, "schema_version")}
