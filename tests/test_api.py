"""`peanchor.analyze`: the Python front end runs the CLI's analysis, takes data in every form a notebook has it,
wraps timm and transformers models, refuses bad input in one line, and its results plot and save."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
from pathlib import Path

import pytest
import torch
from matplotlib.figure import Figure
from torch.utils.data import DataLoader, TensorDataset

import peanchor
from peanchor.analysis.shifts import Shift
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import AnalysisPlan
from peanchor.data import DataInfo
from peanchor.core.errors import ConfigError, DataError, PeanchorError
from peanchor.results.records import read_analysis

ROOT = Path(__file__).resolve().parents[1]
STATS = dict(mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
FAST = dict(alphas=[1.0, 0.0], batch_size=8, progress=False)


@pytest.fixture(scope="module")
def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=g), torch.arange(12) % 4


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    torch.manual_seed(0)
    return peanchor.create_model("vit_micro", pe="ape", num_classes=4).eval()


def test_analyze_is_the_analysis_the_cli_runs(model, data) -> None:
    images, labels = data
    result = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], **STATS, **FAST)
    info = DataInfo(num_classes=4, img_size=16, name="tensors", **STATS)
    plan = AnalysisPlan({"jpeg": Shift("jpeg", quality=10)}, {"jpeg": "--shift jpeg:quality=10"}, alphas=[1.0, 0.0],
                        batch_size=8)  # fmt: skip
    direct = evaluate_model(model, EvalSet(images, labels, info), plan, info=info, progress=False)
    assert result.ssdc == direct.ssdc and result.acc == direct.acc and result.alpha_sweep == direct.alpha_sweep
    assert result.position_probe == direct.position_probe and result.attention_distance == direct.attention_distance
    assert result.shift_sources == {"jpeg": "--shift jpeg:quality=10"} and result.source["kind"] == "python"


def test_shift_objects_and_strings_are_the_same_and_are_the_whole_list(model, data) -> None:
    by_text = peanchor.analyze(model, *data, shifts=["blur:sigma=0.7,kernel_size=3"], **STATS, **FAST)
    by_object = peanchor.analyze(model, *data, shifts=[Shift("blur", sigma=0.7, kernel_size=3)], **STATS, **FAST)
    assert list(by_text.acc) == ["blur"] and by_text.acc == by_object.acc and by_text.shifts == by_object.shifts
    default = peanchor.analyze(model, *data, **STATS, **FAST)  # the resolution rule's shifts
    assert sorted(default.shifts) == ["blur", "jpeg"]


def test_every_form_of_data_gives_the_same_analysis(model, data) -> None:
    images, labels = data
    reference = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], **STATS, **FAST)
    dataset = TensorDataset(images, labels)
    for form in ((images, labels), dataset, DataLoader(dataset, batch_size=5)):
        again = peanchor.analyze(model, form, shifts=["jpeg:quality=10"], **STATS, **FAST)
        assert again.ssdc == reference.ssdc and again.clean_acc == reference.clean_acc


def test_lenses_choose_what_the_result_reports(model, data) -> None:
    only_ssdc = peanchor.analyze(model, *data, lenses=["ssdc"], shifts=["jpeg:quality=10"], **STATS, **FAST)
    assert list(only_ssdc.lenses) == ["ssdc"] and only_ssdc.settings.lenses == ["ssdc"]
    with pytest.raises(ConfigError, match="unknown lens 'ranks'; valid: ssdc, position_probe, attention_distance, "
                       "effective_rank"):  # fmt: skip
        peanchor.analyze(model, *data, lenses=["ranks"], **STATS, **FAST)


def _one_line(error: pytest.ExceptionInfo) -> str:
    text = str(error.value)
    assert "\n" not in text and isinstance(error.value, PeanchorError)
    return text


def test_bad_input_is_one_line(model, data) -> None:
    images, labels = data
    cases = [
        (dict(model=torch.nn.Linear(3, 3), data=images, labels=labels), "cannot analyse a torch.nn.modules.linear.Linear"),
        (dict(model=model, data=images.float(), labels=labels), "images must be uint8 (N, 3, S, S)"),
        (dict(model=model, data=images[:, :1], labels=labels), "got torch.uint8 (12, 1, 16, 16)"),
        (dict(model=model, data=images, labels=labels[:5]), "labels must be integers of shape (12,)"),
        (dict(model=model, data=torch.zeros(2, 3, 32, 32, dtype=torch.uint8), labels=torch.zeros(2, dtype=torch.long)),
         "images are 32 px but the model takes 16 px (its 4x4 patch grid)"),
        (dict(model=model, data=images, labels=labels + 4), "labels go up to 7 but the model has 4 outputs"),
        (dict(model=model, data=42, labels=None), "cannot read images from a int"),
        (dict(model=model, data=images[:0], labels=labels[:0]), "the evaluation set is empty"),
    ]  # fmt: skip
    for kwargs, message in cases:
        with pytest.raises(PeanchorError) as e:
            peanchor.analyze(**kwargs, **STATS, **FAST)
        assert message in _one_line(e), message
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(model, images, labels, **FAST)
    assert "pass mean= and std=" in _one_line(e)


def test_labels_are_optional_when_accuracy_is_not_needed(model, data) -> None:
    images, labels = data
    labelled = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], **STATS, **FAST)
    for form in ((images,), (DataLoader(images, batch_size=5),)):  # a tensor alone, a loader of image batches
        bare = peanchor.analyze(model, *form, shifts=["jpeg:quality=10"], **STATS, **FAST)
        assert bare.ssdc == labelled.ssdc and bare.delta_ssdc == labelled.delta_ssdc  # the geometry is the same
        assert bare.position_probe == labelled.position_probe and bare.lens("effective_rank") == labelled.lens("effective_rank")
        assert math.isnan(bare.clean_acc) and math.isnan(bare.rpi_acc) and math.isnan(bare.fragility["jpeg"])
        assert all(math.isnan(p.clean_acc) and math.isnan(p.fragility["jpeg"]) for p in bare.alpha_sweep)
        assert bare.source["accuracy"] == "none: no labels were given (accuracy and FS are NaN)"
        assert "no labels were given" in repr(bare)
    assert "accuracy" not in labelled.source and math.isfinite(labelled.clean_acc)
    mixed = [(images[:6], labels[:6]), images[6:]]
    with pytest.raises(DataError, match="labels for some batches and not for others"):
        peanchor.analyze(model, mixed, **STATS, **FAST)


def test_a_loaded_model_carries_its_normalisation(model, data, tmp_path) -> None:
    from peanchor.checkpoint.files import save_model
    from peanchor.data import IMAGENET_MEAN, IMAGENET_STD

    images, labels = data
    config = {"data": {"name": "scenes", "img_size": 16}}
    save_model(model, tmp_path / "model.safetensors", extra_metadata={"config": config})
    loaded = peanchor.load_model(tmp_path)
    assert (loaded.mean, loaded.std) == (IMAGENET_MEAN, IMAGENET_STD)  # the dataset it was trained on
    result = peanchor.analyze(loaded, images, labels, shifts=["jpeg:quality=10"], **FAST)  # no mean=/std=
    given = peanchor.analyze(model, images, labels, shifts=["jpeg:quality=10"], mean=IMAGENET_MEAN,
                             std=IMAGENET_STD, **FAST)  # fmt: skip
    assert result.ssdc == given.ssdc and result.acc == given.acc
    other = peanchor.analyze(loaded, images, labels, shifts=["jpeg:quality=10"], **STATS, **FAST)  # mean= wins
    assert other.ssdc != result.ssdc
    save_model(model, tmp_path / "bare.safetensors")  # no training config: nothing to carry
    assert peanchor.load_model(tmp_path / "bare.safetensors").mean is None


def test_a_prepared_dataset_carries_its_own_normalisation(tmp_path) -> None:
    from peanchor.data import DataSpec, normalization
    from peanchor.data.prepared import FORMAT, VERSION

    meta = {"format": FORMAT, "version": VERSION, "mean": [0.1, 0.2, 0.3], "std": [0.4, 0.5, 0.6]}
    (tmp_path / "meta.json").write_text(json.dumps(meta))
    assert normalization(DataSpec(name="prepared", root=str(tmp_path), img_size=16)) == ((0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    with pytest.raises(DataError, match="meta.json is missing"):
        normalization(DataSpec(name="prepared", root=str(tmp_path / "gone"), img_size=16))


def test_save_writes_analysis_json_that_reads_back(model, data, tmp_path) -> None:
    result = peanchor.analyze(model, *data, shifts=["jpeg:quality=10"], **STATS, **FAST)
    path = result.save(tmp_path / "out")
    assert path == tmp_path / "out" / "analysis.json" and (tmp_path / "out" / "analysis.csv").is_file()
    assert read_analysis(path) == result


def test_a_timm_model_is_wrapped(data) -> None:
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    vit = timm.create_model("vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=32, depth=2, num_heads=2,
                            num_classes=4).eval()  # fmt: skip
    result = peanchor.analyze(vit, *data, shifts=["jpeg:quality=10"], **FAST)  # normalised with timm's stats
    assert result.model.pe == "timm:ape" and len(result.ssdc.normal) == 2 and math.isfinite(result.clean_acc)
    # Built without a head (num_classes=0), its pass gives pooled features: geometry only, as a transformers
    # backbone, its accuracies NaN and the geometry that of the same weights with a head.
    headless = timm.create_model("vit_tiny_patch16_224", img_size=16, patch_size=4, embed_dim=32, depth=2,
                                 num_heads=2, num_classes=0).eval()  # fmt: skip
    headless.load_state_dict({k: v for k, v in vit.state_dict().items() if not k.startswith("head.")})
    features = peanchor.analyze(headless, *data, shifts=["jpeg:quality=10"], **FAST)
    assert math.isnan(features.clean_acc) and math.isnan(features.fragility["jpeg"])
    assert features.source["accuracy"].startswith("none: the model has no classification head")
    assert features.ssdc == result.ssdc and features.delta_ssdc == result.delta_ssdc


def test_transformers_models_are_wrapped_and_backbones_report_no_accuracy(data, tmp_path) -> None:
    T = pytest.importorskip("transformers")
    tiny = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, patch_size=4)
    torch.manual_seed(0)
    backbone = T.Dinov2Model(T.Dinov2Config(image_size=16, **tiny)).eval()
    result = peanchor.analyze(backbone, *data, shifts=["jpeg:quality=10"], **FAST)
    assert result.model.pe == "hf:ape" and result.model.grid == [4, 4] and len(result.ssdc.rpi) == 2
    assert math.isnan(result.clean_acc) and math.isnan(result.alpha_sweep[1].fragility["jpeg"])
    assert result.source["accuracy"].startswith("none: the model has no classification head")
    assert result.attention_distance is not None  # from transformers' eager attention
    assert math.isnan(read_analysis(result.save(tmp_path)).clean_acc)  # NaN survives the file
    # A classifier built for 32 px analyses 16 px images through transformers' interpolate_pos_encoding.
    classifier = T.ViTForImageClassification(T.ViTConfig(image_size=32, num_labels=4, **tiny)).eval()
    result = peanchor.analyze(classifier, *data, shifts=["jpeg:quality=10"], **FAST)
    assert result.model.grid == [4, 4] and 0.0 <= result.clean_acc <= 1.0


def test_plots_draw_from_one_result_or_several(model, data) -> None:
    result = peanchor.analyze(model, *data, shifts=["jpeg:quality=10"], **STATS, **FAST)
    ssdc = peanchor.plot_ssdc_per_layer({"ape": result, "again": [result, result]})
    assert isinstance(ssdc, Figure)
    titles = [ax.get_title() for ax in ssdc.axes]
    assert "SSDC per layer, tokens in order" in titles and "SSDC per layer, under RPI (tokens shuffled)" in titles
    labels = {t.get_text() for legend in ssdc.legends for t in legend.get_texts()}
    assert {"ape (APE) (n=1)", "again (n=2)"} <= labels or {"ape (n=1)", "again (n=2)"} <= labels, labels
    sweep = peanchor.plot_alpha_sweep(result)
    defined = any(math.isfinite(p.fragility["jpeg"]) for p in result.alpha_sweep)  # FS at chance is undefined (NaN)
    assert [ax.get_ylabel() for ax in sweep.axes] == ["ΔSSDC (under RPI)", *(["FS (jpeg)"] if defined else [])]
    legend = {t.get_text() for fig in (sweep, peanchor.plot_alpha_sweep(result, paper_reference=True))
              for legend in fig.legends for t in legend.get_texts()}  # fmt: skip
    assert any(t.startswith("APE, paper") for t in legend)
    assert not any(t.startswith("APE, paper") for legend in sweep.legends for t in (x.get_text() for x in legend.get_texts()))
    assert len(peanchor.plot_lenses([result]).axes) == 2 * len(result.lenses) and isinstance(peanchor.plot_attention_heads(result), Figure)
    flat = peanchor.analyze(model, *data, shifts=["jpeg:quality=10"], **STATS, **{**FAST, "alphas": ()})
    with pytest.raises(DataError, match="nothing to plot: no α sweep"):
        peanchor.plot_alpha_sweep(flat)


@pytest.mark.slow
def test_the_readme_python_example_runs(tmp_path, monkeypatch) -> None:
    """The README's "Python" section, executed as written (in a scratch directory), twice: an end-to-end run (a timm
    model analysed and saved), so CI's, not the development loop's."""
    text = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- python-example -->\s*```python\n(.*?)```", text, re.S)
    assert block is not None, "README.md lost its tested Python example"
    code = block.group(1)
    assert len(code.strip().splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    printed = []
    for _ in range(2):  # seeded: the same numbers every run
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(code, "README.md", "exec"), {})
        printed.append(out.getvalue())
    assert printed[0] == printed[1]
    assert "data scenes, 64 images, 32 px; interventions none" in printed[0]
    assert re.search(r"layer 3: SSDC under RPI [+-]\d\.\d{3}, 95% interval over the images \[", printed[0])
    written = json.loads((tmp_path / "runs" / "readme-example" / "analysis.json").read_text())
    assert written["schema"] == "peanchor.analysis"
    if written.get("chance") is not None and written["clean_acc_ci"][0] <= written["chance"]:
        assert "FS jpeg undefined: " in printed[0] and "fs_jpeg=n/a" in printed[0]  # at chance: said, not a number


def test_a_transformers_model_follows_the_images_resolution_and_keeps_its_mode(data) -> None:
    T = pytest.importorskip("transformers")
    config = T.ViTConfig(image_size=32, patch_size=4, num_labels=4, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64)  # fmt: skip
    model = T.ViTForImageClassification(config)  # in training mode, as built
    result = peanchor.analyze(model, TensorDataset(*data), shifts=["jpeg:quality=10"], **FAST)
    assert result.model.grid == [4, 4] and model.training  # 16 px images, interpolated table; mode kept
    model.eval()
    peanchor.analyze(model, data, shifts=["jpeg:quality=10"], **FAST)
    assert not model.training


def test_a_named_dataset_must_match_the_heads_classes() -> None:
    T = pytest.importorskip("transformers")
    config = T.ViTConfig(image_size=16, patch_size=4, num_labels=5, hidden_size=32, num_hidden_layers=1,
                         num_attention_heads=2, intermediate_size=64)  # fmt: skip
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(T.ViTForImageClassification(config), "scenes", max_images=8, **FAST)
    assert "the model has 5 outputs but the dataset has 10 classes" in _one_line(e) and "config.num_labels" in str(e.value)


def test_a_plan_is_the_bottom_layer_and_the_keywords_win(model, data) -> None:
    first = peanchor.analyze(model, *data, shifts=["jpeg:quality=10"], rpi_draws=2, **STATS, **FAST)
    plan = peanchor.AnalysisPlan.from_result(first)
    assert plan.rpi_draws == 2 and plan.batch_size == 8 and list(plan.shifts) == ["jpeg"]
    again = peanchor.analyze(model, *data, plan=plan, **STATS, progress=False)  # the plan's shifts and settings
    assert again.ssdc == first.ssdc and again.alpha_sweep == first.alpha_sweep and again.settings == first.settings
    one_draw = peanchor.analyze(model, *data, plan=plan, rpi_draws=1, **STATS, progress=False)
    assert one_draw.settings.rpi_draws == 1 and one_draw.shifts == first.shifts
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(model, *data, plan=plan, preset="smoke", **STATS, progress=False)
    assert "give plan= or preset=, not both" in _one_line(e)
    with pytest.raises(ConfigError) as e:
        peanchor.analyze(model, *data, lenses=["position_probe"], **STATS, **FAST)
    assert _one_line(e).startswith("analysis.lenses=['position_probe']: 'ssdc' is always measured")
