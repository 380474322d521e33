"""`peanchor.analyze(..., interventions=[...])`: edit objects (a `Hook` too) reach the analysis as themselves; an
identity hook gives the plain analysis bit for bit, and a point the model lacks is one line listing its points."""

from __future__ import annotations

import pytest
import torch

import peanchor
from peanchor.analysis.shifts import Shift
from peanchor.core.errors import ConfigError
from peanchor.interventions import Hook
from peanchor.interventions.kinds.pe_zero import PEZero

STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
FAST = dict(alphas=[1.0, 0.0], batch_size=8, progress=False, shifts=[Shift("jpeg", quality=10)])


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(12) % 4


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return peanchor.create_model("vit_micro", pe="ape", num_classes=4).eval()


def _numbers(result: peanchor.AnalysisResult) -> tuple:
    return (result.ssdc, result.acc, result.clean_acc, result.rpi_acc, result.alpha_sweep, result.delta_ssdc,
            {name: result.lens(name) for name in result.lenses})  # fmt: skip


def test_an_identity_hook_gives_the_plain_analysis_bit_for_bit(model, data) -> None:
    calls = []

    def identity(x: torch.Tensor) -> torch.Tensor:  # (B, T, D)
        calls.append(x.shape)
        return x

    plain = peanchor.analyze(model, *data, **STATS, **FAST)
    hooked = peanchor.analyze(model, *data, interventions=[Hook("blocks.0.residual", identity)], **STATS, **FAST)
    assert calls and _numbers(hooked) == _numbers(plain)
    assert hooked.settings.interventions == [f"hook:point=blocks.0.residual,fn={__name__}:{identity.__qualname__}"]


def test_a_hook_that_changes_the_residual_changes_the_analysis(model, data) -> None:
    plain = peanchor.analyze(model, *data, **STATS, **FAST)
    rolled = peanchor.analyze(model, *data, interventions=[Hook("blocks.0.residual", lambda x: x.roll(1, dims=1))],
                              **STATS, **FAST)  # fmt: skip (each token takes its neighbour's residual)
    assert rolled.ssdc != plain.ssdc


def test_an_edit_object_is_its_spec_text(model, data) -> None:
    by_text = peanchor.analyze(model, *data, interventions=["pe_zero"], **STATS, **FAST)
    by_object = peanchor.analyze(model, *data, interventions=[PEZero()], **STATS, **FAST)
    assert _numbers(by_object) == _numbers(by_text) and by_object.settings.interventions == ["pe_zero:prefix=zero"]


@pytest.mark.parametrize(
    ("point", "said"),
    [("rope.tables", "hook acts at rope.tables, which "), ("blocks.7.mlp", "Hook point 'blocks.7.mlp': ")],
)
def test_a_point_the_model_lacks_is_one_line_listing_its_points(model, data, point, said) -> None:
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(model, *data, interventions=[Hook(point, lambda x: x)], **STATS, **FAST)
    text = str(e.value)
    assert "\n" not in text and said in text
    assert "it has: pe.table" in text or "has 2 blocks (0-1)" in text


def test_a_hooks_record_reads_back_to_the_plan_and_so_does_one_that_named_no_module(model, data, tmp_path) -> None:
    """The plan of an analysis made under a hook is read back from its file, equal to the plan that made it; a file
    written before hooks named their module (``fn=tanh``) reads back too, and running it again is one line."""
    import json

    from peanchor.analysis.plan import AnalysisPlan
    from peanchor.interventions import Intervention
    from peanchor.results.records import read_analysis

    hooked = peanchor.analyze(model, *data, interventions=[Hook("blocks.0.residual", torch.tanh)], **STATS, **FAST)
    path = hooked.save(tmp_path / "now")
    plan = AnalysisPlan.from_result(read_analysis(path))
    assert plan.interventions == (Hook("blocks.0.residual", torch.tanh),)
    doc = json.loads(path.read_text())
    doc["settings"]["interventions"] = ["hook:point=blocks.0.residual,fn=tanh"]  # as the first hooks wrote it
    (tmp_path / "before").mkdir()
    (tmp_path / "before" / "analysis.json").write_text(json.dumps(doc))
    older = AnalysisPlan.from_result(read_analysis(tmp_path / "before" / "analysis.json"))
    assert [e.spec for e in older.interventions] == ["hook:point=blocks.0.residual,fn=tanh"]
    wrapped = peanchor.api.analysis.wrap_model(model)
    with pytest.raises(ConfigError, match=r"^hook function 'tanh' names no module: expected the function as MODULE"):
        wrapped.forward_intermediates(data[0][:2].float(), Intervention().with_edits(*older.interventions))
