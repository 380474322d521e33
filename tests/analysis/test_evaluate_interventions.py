"""Edits in an analysis: ``peanchor.analyze(..., interventions=[...])`` and ``peanchor analyze --intervention`` measure
every lens, the accuracy and the FS under the combined edit, record it, and refuse a bad spec in one line."""

from __future__ import annotations

import json

import pytest
import torch

import peanchor
from peanchor.analysis.plan import AnalysisPlan, resolve_plan
from peanchor.core.errors import ConfigError
from peanchor.results.records import read_analysis

STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
FAST = dict(alphas=(), batch_size=8, progress=False, shifts=["jpeg:quality=10"])


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (16, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(16) % 4


def micro(pe: str, seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = peanchor.create_model("vit_micro", pe=pe, num_classes=4).eval()
    with torch.no_grad():  # peaked attention and a unit head: positions visibly matter
        for block in model.blocks:
            block.attn.qkv.weight.mul_(20)
        torch.nn.init.normal_(model.head.weight)
    return model


def measures(result) -> dict:
    """Every measured number of an analysis (what an edit may change), not its provenance."""
    return {"lenses": result.lenses, "clean": result.clean_acc, "rpi": result.rpi_acc, "acc": result.acc,
            "fs": result.fragility, "delta": result.delta_ssdc}  # fmt: skip


def test_an_analysis_under_pe_zero_is_the_analysis_of_the_same_weights_without_a_pe(data) -> None:
    ape = micro("ape")
    none = micro("none", seed=9)
    none.load_state_dict({k: v for k, v in ape.state_dict().items() if not k.startswith("pe.")})
    zeroed = peanchor.analyze(ape, *data, interventions=["pe_zero"], **STATS, **FAST)
    assert measures(zeroed) == measures(peanchor.analyze(none, *data, **STATS, **FAST))
    assert measures(zeroed) != measures(peanchor.analyze(ape, *data, **STATS, **FAST))
    assert zeroed.settings.interventions == ["pe_zero:prefix=zero"]


def test_the_edits_are_recorded_and_read_back_into_the_same_plan(data, tmp_path) -> None:
    model = micro("rope")
    result = peanchor.analyze(model, *data, interventions=["rope_planes:axis=x+head_ablate:layers=1,heads=0"],
                              **STATS, **FAST)  # fmt: skip
    result.save(tmp_path)
    stored = read_analysis(tmp_path / "analysis.json")
    assert stored.settings.interventions == ["rope_planes:layers=all,heads=all,axis=x,freqs=all",
                                             "head_ablate:layers=1,heads=0,value=zero"]  # fmt: skip
    plan = AnalysisPlan.from_result(stored)
    assert tuple(e.spec for e in plan.interventions) == tuple(stored.settings.interventions)  # edits, as objects
    assert plan == resolve_plan(16, defaults=plan, given={"interventions": ["rope_planes:axis=x",
                                                                             "head_ablate:layers=1,heads=0"]})
    older = json.loads((tmp_path / "analysis.json").read_text())
    del older["settings"]["interventions"]  # a file written before edits existed: none were applied
    (tmp_path / "analysis.json").write_text(json.dumps(older))
    assert AnalysisPlan.from_result(read_analysis(tmp_path / "analysis.json")).interventions == ()


def test_a_mean_ablation_is_fitted_on_the_evaluation_images(data) -> None:
    """Mean ablation of every head of block 0 equals its attention branch set to its mean over the clean images,
    computed here with forward hooks."""
    model = micro("ape")
    x = (data[0].float() / 255 - 0.5) / 0.25
    outputs = []
    handle = model.blocks[0].attn.register_forward_hook(lambda m, i, out: outputs.append(out))
    with torch.no_grad():
        model(x)
    handle.remove()
    mean = outputs[0].double().mean(0).float()  # (T, D): the projection is linear, so its mean is the mean's image
    handle = model.blocks[0].attn.register_forward_hook(lambda m, i, out: mean.expand_as(out))
    by_hand = peanchor.analyze(model, *data, **STATS, **FAST)
    handle.remove()
    ablated = peanchor.analyze(model, *data, interventions=["head_ablate:layers=0,value=mean"], **STATS, **FAST)
    assert ablated.clean_acc == by_hand.clean_acc and ablated.acc == by_hand.acc
    for a, b in zip(ablated.ssdc.normal, by_hand.ssdc.normal):
        assert a == pytest.approx(b, abs=1e-5)


@pytest.mark.parametrize(
    "interventions, message",
    [
        (["rope_planes"], "rope_planes acts at rope.tables, which peanchor:ape does not have"),
        (["pe_zreo"], "analysis.interventions: unknown intervention 'pe_zreo' (did you mean 'pe_zero'?); valid: "),
        (["head_ablate:heads=7"], "head_ablate:heads=7: the model has 2 heads (0-1)"),
    ],
)
def test_a_bad_edit_is_one_line_before_any_pass(data, interventions, message) -> None:
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(micro("ape"), *data, interventions=interventions, **STATS, **FAST)
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.slow
def test_the_cli_measures_under_repeated_interventions(tmp_path, capsys) -> None:
    from peanchor.checkpoint.files import save_model
    from peanchor.cli import main
    from peanchor.presets.catalog import resolve_config

    run = tmp_path / "run"  # a run directory as `peanchor train --preset smoke --pe ape` leaves it (untrained)
    run.mkdir()
    (run / "config.yaml").write_text(resolve_config("smoke", {"model.pe": "ape"}).to_yaml())
    torch.manual_seed(0)
    model = peanchor.create_model("vit_micro", pe="ape", num_classes=10, img_size=16).eval()
    save_model(model, run / "model.safetensors")
    out = tmp_path / "out"
    base = ["analyze", str(run), "--images", "12", "--no-alpha", "--device", "cpu", "--no-progress", "--out", str(out)]
    assert main(base + ["--intervention", "pe_zero", "--intervention", "patch:site=residual,layer=1"]) == 0
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["settings"]["interventions"] == ["pe_zero:prefix=zero",
                                                "patch:site=residual,layer=1,donor=clean,seed=0"]  # fmt: skip
    # the clean residual of the last block patched into every pass: RPI changes nothing any more
    assert doc["rpi_acc"] == doc["clean_acc"]
    # another --out: the first one holds an analysis made with other settings, which analyze refuses to replace
    assert main([*base[:-1], str(tmp_path / "other"), "--intervention", "rope_planes"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].endswith("rope_planes acts at rope.tables, which peanchor:ape does not have; it has: pe.table, "
                            "input.grid, blocks.{k}.attn.heads, blocks.{k}.attn, blocks.{k}.mlp, blocks.{k}.residual")


@pytest.mark.parametrize("backend", ["timm", "transformers"])
def test_the_adapters_are_analysed_under_edits_too(data, backend) -> None:
    """pe_zero on an adapter's model equals the analysis of the same model with its table zeroed by hand."""
    if backend == "timm":
        pytest.importorskip("timm")
        from peanchor.adapters import load_timm_model

        torch.manual_seed(0)
        model = load_timm_model("vit_small_patch16_224", img_size=16, patch_size=4, depth=2, embed_dim=32,
                                num_heads=2, num_classes=4)  # fmt: skip
        table = model.model.pos_embed
    else:
        transformers = pytest.importorskip("transformers")
        from peanchor.adapters.hf_vit import HFViT

        torch.manual_seed(0)
        config = transformers.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, image_size=16, patch_size=4, num_labels=4)  # fmt: skip
        model = HFViT(transformers.ViTForImageClassification(config).eval())
        table = model.model.vit.embeddings.position_embeddings
    with torch.no_grad():
        torch.nn.init.normal_(table)
    edited = peanchor.analyze(model, *data, interventions=["pe_zero"], **STATS, **FAST)
    with torch.no_grad():
        table.zero_()
    assert measures(edited) == measures(peanchor.analyze(model, *data, **STATS, **FAST))
