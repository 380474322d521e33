"""The evaluation suite: exact FS / ΔSSDC arithmetic, SSDC equal to the accumulator run by hand, the α sweep
(only for scalable PEs, α = 1 equal to the main numbers), the pass count, the tidy CSV and `peanchor analyze`."""

from __future__ import annotations

import csv
import json
import math

import pytest
import torch

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.shifts import Shift, paper_shifts
from peanchor.analysis.evalset import EvalSet, subset_indices
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import AnalysisPlan
from peanchor.results.records import analysis_rows, read_analysis, write_analysis
from peanchor.cli import main
from peanchor.data import normalize
from peanchor.interventions.permutation import image_permutations
from peanchor.metrics import SSDCAccumulator
from peanchor.pe import PE_NAMES, PE_REGISTRY

from tests.helpers.builders import plan, tiny_info

INFO = tiny_info(["tl", "tr", "bl", "br"], "quadrants")
ALPHAS = (1.0, 0.5, 0.0)


def quadrant_images(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """16 px images: dark noise with a bright 8×8 square in the quadrant named by the label (a spatial task)."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 4, (n,), generator=g)
    images = (torch.rand(n, 3, 16, 16, generator=g) * 90).to(torch.uint8)  # (n, 3, 16, 16)
    for q in range(4):
        r, c = divmod(q, 2)
        images[labels == q, :, r * 8 : (r + 1) * 8, c * 8 : (c + 1) * 8] += 140
    return images, labels



@pytest.fixture(scope="module")
def evalset() -> EvalSet:
    images, labels = quadrant_images(96, seed=1)
    return EvalSet.from_tensors(images, labels, INFO)


@pytest.fixture(scope="module")
def trained_ape(fit_briefly, micro) -> torch.nn.Module:
    """A vit_micro with APE trained for a few dozen steps (well above chance on the quadrant task)."""
    images, labels = quadrant_images(512, seed=0)
    return fit_briefly(micro("ape", num_classes=4), images, labels, INFO)


@pytest.fixture(scope="module")
def trained_result(trained_ape, evalset) -> dict:
    return evaluate_model(trained_ape, evalset, plan(alphas=ALPHAS, batch_size=32), info=INFO, device="cpu",
                          progress=False)


def test_result_schema_and_exact_arithmetic(trained_result, tmp_path):
    write_analysis(trained_result, tmp_path)
    assert read_analysis(tmp_path) == trained_result  # analysis.json round-trips to the same record
    r = json.loads((tmp_path / "analysis.json").read_text())  # what a reader of analysis.json sees
    assert r["clean_acc"] > 0.5  # trained: far above chance (0.25)
    assert r["num_images"] == 96
    assert r["delta_ssdc"] == r["lenses"]["ssdc"]["rpi"][1] - r["lenses"]["ssdc"]["rpi"][0]
    assert set(r["acc"]) == set(r["fragility"]) == {"jpeg", "blur"}
    for k, acc in r["acc"].items():
        assert r["fragility"][k] == 1 - acc / r["clean_acc"]
    assert r["shifts"] == {k: s.describe() for k, s in paper_shifts(16).items()}
    for entry in r["alpha_sweep"]:
        assert entry["delta_ssdc"] == entry["ssdc_rpi"][1] - entry["ssdc_rpi"][0]
        undefined = entry.get("fragility_undefined") or {}
        for k, acc in entry["acc"].items():
            if k in undefined:  # FS at chance: null, with the reason (the clean accuracy's interval reaches chance)
                assert entry["fragility"][k] is None and entry["clean_acc_ci"][0] <= r["chance"] == 0.25
            else:
                assert entry["fragility"][k] == 1 - acc / entry["clean_acc"]
    ssdc = r["lenses"]["ssdc"]
    assert len(ssdc["normal"]) == len(ssdc["rpi"]) == len(ssdc["rpi_std"]) == 2  # vit_micro: 2 blocks


def test_alpha_one_is_the_main_result_and_alpha_changes_things(trained_result):
    sweep = {e.alpha: e for e in trained_result.alpha_sweep}
    assert list(sweep) == list(ALPHAS)
    one = sweep[1.0]
    assert one.delta_ssdc == trained_result.delta_ssdc
    assert one.clean_acc == trained_result.clean_acc
    assert one.acc == trained_result.acc and one.fragility == trained_result.fragility
    # Without its PE the trained APE model loses its positional reading: the quadrant task falls to near chance.
    assert sweep[0.0].clean_acc < one.clean_acc - 0.1


def test_sweep_entries_match_a_separate_evaluation_at_that_alpha(trained_ape, evalset, trained_result):
    """The α = 0.5 point equals the accuracy and ΔSSDC measured by hand at α = 0.5."""
    x = normalize(evalset.images, INFO.mean, INFO.std)
    with torch.inference_mode():
        acc = (trained_ape(x, pe_scale=0.5).argmax(-1) == evalset.labels).sum().item() / len(evalset)
        accumulator = SSDCAccumulator(trained_ape.grid)
        for start in range(0, len(evalset), 7):  # any batches: each image has its own stream (seed 0, draw 0, index)
            index = list(range(start, min(start + 7, len(evalset))))
            perm = image_permutations(trained_ape.num_patches, index, seed=0, draw=0)  # (b, N)
            accumulator.update(trained_ape.spatial_tokens(x[index], token_perm=perm, pe_scale=0.5))
    rpi = accumulator.compute().tolist()
    entry = next(e for e in trained_result.alpha_sweep if e.alpha == 0.5)
    assert entry.clean_acc == pytest.approx(acc, abs=1e-12)
    assert entry.delta_ssdc == pytest.approx(rpi[1] - rpi[0], abs=1e-9)


@pytest.mark.parametrize("pe", PE_NAMES)
def test_ssdc_normal_equals_the_accumulator_on_spatial_tokens(pe, evalset, micro):
    model = micro(pe, num_classes=4)
    r = evaluate_model(model, evalset, plan(alphas=ALPHAS, batch_size=40), info=INFO, device="cpu", progress=False)
    accumulator = SSDCAccumulator(model.grid)
    with torch.inference_mode():
        for start in range(0, len(evalset), 40):
            accumulator.update(model.spatial_tokens(normalize(evalset.images[start : start + 40], INFO.mean, INFO.std)))
    torch.testing.assert_close(torch.tensor(r.ssdc.normal, dtype=torch.float64), accumulator.compute(),
                               rtol=0, atol=1e-9)  # fmt: skip
    # The α sweep exists exactly for PEs whose class is scalable.
    assert model.pe_scalable == PE_REGISTRY[pe].scalable
    assert [e.alpha for e in r.alpha_sweep] == (list(ALPHAS) if PE_REGISTRY[pe].scalable else [])
    assert r.model.scalable == PE_REGISTRY[pe].scalable


def test_untrained_none_model_has_no_structure_under_rpi(micro):
    """Without a PE the model is permutation-equivariant: under RPI the index grid carries no information."""
    images, labels = quadrant_images(256, seed=3)
    evalset = EvalSet.from_tensors(images, labels, INFO)
    shifts = {"blur": Shift("blur", sigma=1.0)}
    r = evaluate_model(micro("none", num_classes=4), evalset, AnalysisPlan(shifts, alphas=(), batch_size=8), info=INFO, device="cpu",
                       progress=False)
    # SSDC of a mean similarity matrix that is constant but for noise: about 0, and 0 within its interval
    assert max(abs(v) for v in r.ssdc.rpi) < 0.2, r.ssdc.rpi
    assert all(low <= 0 <= high for low, high in zip(*r.ssdc.rpi_ci)), r.ssdc.rpi_ci
    assert min(r.ssdc.normal) > 0.2  # while content alone gives spatial structure without RPI
    assert r.alpha_sweep == []


def _count_calls(model: torch.nn.Module) -> dict[str, int]:
    """Wrap the one pass of ``model`` (an instance attribute) and count its calls by what they compute: the logits
    alone, logits and every layer's tokens, every layer's tokens without the head, or the first layers only."""
    counts = {"logits": 0, "full": 0, "tokens": 0, "truncated": 0}
    original = model.forward_intermediates

    def wrapper(images, intervention, *, layers=None, head=True, attention=None):
        kind = "logits" if layers == 0 else "truncated" if layers is not None else "full" if head else "tokens"
        counts[kind] += 1
        return original(images, intervention, layers=layers, head=head, attention=attention)

    model.forward_intermediates = wrapper
    return counts


@pytest.mark.parametrize("pe", ["ape", "none"])
def test_forward_pass_count_is_what_was_done(pe, evalset, micro):
    model = micro(pe, num_classes=4)
    counts = _count_calls(model)
    batches = math.ceil(len(evalset) / 40)
    r = evaluate_model(model, evalset, plan(alphas=ALPHAS, rpi_draws=2, batch_size=40, rpi_mode="per_call"), info=INFO,
                       device="cpu", progress=False)  # fmt: skip
    calls = sum(counts.values())
    assert calls == r.forward_passes * batches
    shifts, alphas, draws = 2, len(ALPHAS), 2
    if pe == "none":
        # clean (+lenses), 2 RPI draws (+ SSDC and attention), the probe's pass under each draw, 2 shifts
        assert r.forward_passes == 1 + 2 * draws + shifts and counts["truncated"] == 0
    else:
        # ... plus, at each α ≠ 1: clean, 2 shifts (full) and 2 two-block RPI passes
        assert r.forward_passes == 1 + 2 * draws + shifts + (alphas - 1) * (1 + shifts + draws)
        assert counts["truncated"] == (alphas - 1) * draws * batches
    assert counts["full"] == (1 + draws) * batches and counts["tokens"] == draws * batches  # the probe's own passes
    assert r.passes["probe_rpi"] == draws and r.passes["full"] + r.passes["truncated"] == r.forward_passes


def test_rpi_draws_give_mean_and_std(evalset, micro):
    r = evaluate_model(micro("sincos", num_classes=4), evalset, plan(alphas=(), rpi_draws=3, batch_size=32), info=INFO, device="cpu",
                       progress=False)  # fmt: skip
    draws = torch.tensor(r.ssdc.rpi_draws, dtype=torch.float64)  # (3, L)
    assert draws.shape == (3, 2) and not torch.allclose(draws[0], draws[1])
    torch.testing.assert_close(torch.tensor(r.ssdc.rpi, dtype=torch.float64), draws.mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(torch.tensor(r.ssdc.rpi_std, dtype=torch.float64), draws.std(0), rtol=0, atol=1e-12)
    assert r.delta_ssdc == r.ssdc.rpi[1] - r.ssdc.rpi[0]


def test_bootstrap_intervals_bracket_the_estimate(evalset, micro):
    r = evaluate_model(micro("sincos", num_classes=4), evalset, plan(alphas=(), bootstrap=50, batch_size=48), info=INFO,
                       device="cpu", progress=False)  # fmt: skip
    for bounds, estimate in ((r.ssdc.normal_ci, r.ssdc.normal), (r.ssdc.rpi_ci, r.ssdc.rpi)):
        low, high = bounds
        assert len(low) == len(high) == 2
        assert all(lo <= e <= hi for lo, e, hi in zip(low, estimate, high))


def test_severities_and_shared_passes(trained_ape, evalset, micro):
    cache = CorruptedCache()
    r = evaluate_model(trained_ape, evalset, plan(alphas=(), severities=True, batch_size=48), info=INFO, device="cpu",
                       progress=False, cache=cache)  # fmt: skip
    assert set(r.severities) == {"jpeg", "blur"} and r.severity_table == "cifar-10-c"
    for kind, accs in r.severities.items():
        assert len(accs) == 5
        assert r.severity_fragility[kind] == [1 - a / r.clean_acc for a in accs] and r.clean_acc_ci[0] > r.chance
        # At <= 48 px the main shifts are CIFAR-10-C severity 3: the same pass, the same number.
        assert r.severity_shifts[kind][2] == r.shifts[kind] and accs[2] == r.acc[kind]
    # 2 main shifts + 10 severities, 2 of them identical: 10 corrupted sets; clean, RPI (which feeds the probe too:
    # one permutation per image), 2 shifts + 8 severities.
    assert len(cache) == 10 and r.forward_passes == 4 + 8
    # A second model reuses the corrupted sets.
    evaluate_model(micro("none", num_classes=4), evalset, plan(alphas=(), severities=True, batch_size=48), info=INFO, device="cpu",
                   progress=False, cache=cache)  # fmt: skip
    assert len(cache) == 10


def test_custom_shifts_are_recorded(evalset, micro):
    shifts = {"jpeg": Shift("jpeg", quality=10), "noise": Shift("gaussian_noise", sigma=0.2, seed=0)}
    r = evaluate_model(micro("none", num_classes=4), evalset, AnalysisPlan(shifts, alphas=(), batch_size=96), info=INFO,
                       device="cpu", progress=False)  # fmt: skip
    assert r.shifts == {"jpeg": {"kind": "jpeg", "quality": 10}, "noise": {"kind": "gaussian_noise", "sigma": 0.2, "seed": 0}}
    assert set(r.fragility) == {"jpeg", "noise"}


def test_tidy_csv_holds_every_number_of_the_json(trained_result, tmp_path):
    write_analysis(trained_result, tmp_path)
    with open(tmp_path / "analysis.csv", newline="") as f:
        read = list(csv.DictReader(f))
    assert len(read) == len(list(analysis_rows(trained_result)))

    def value(metric: str, **where: str) -> float:
        (row,) = [r for r in read if r["metric"] == metric and all(r[k] == v for k, v in where.items())]
        return float(row["value"])

    def same(a: float, b: float) -> bool:
        return (math.isnan(a) and math.isnan(b)) or a == b

    r = trained_result
    assert value("delta_ssdc") == r.delta_ssdc and value("clean_acc") == r.clean_acc
    for layer, v in enumerate(r.ssdc.rpi):
        assert value("ssdc_rpi", layer=str(layer)) == v
    for k, v in r.fragility.items():
        assert same(value("fragility", shift=k, severity=""), v)
    for e in r.alpha_sweep:
        assert value("sweep_delta_ssdc", alpha=str(e.alpha)) == e.delta_ssdc
        assert same(value("sweep_fragility", alpha=str(e.alpha), shift="jpeg"), e.fragility["jpeg"])


def test_an_older_or_foreign_analysis_is_one_clear_line(trained_result, tmp_path):
    from peanchor.core.errors import SchemaError

    write_analysis(trained_result, tmp_path)
    doc = json.loads((tmp_path / "analysis.json").read_text())
    for broken, message in (({k: v for k, v in doc.items() if k not in ("schema", "schema_version")}, "no schema field"),
                            ({**doc, "schema_version": 0}, "schema_version 0"),
                            ({**doc, "clean_acc": "high"}, r"clean_acc: Input should be a valid number"),
                            ({**doc, "lenses": {k: v for k, v in doc["lenses"].items() if k != "ssdc"}},
                             r"^\S+: lenses is missing required key 'ssdc'$"),
                            ({k: v for k, v in doc.items() if k != "lenses"},
                             "lenses: expected an object of lens records, got nothing")):  # fmt: skip
        (tmp_path / "analysis.json").write_text(json.dumps(broken))
        with pytest.raises(SchemaError, match=message) as e:
            read_analysis(tmp_path)
        assert "\n" not in str(e.value)


def test_subset_is_deterministic_and_sorted():
    a, b = subset_indices(1000, 100), subset_indices(1000, 100)
    assert torch.equal(a, b) and len(a) == 100 and bool((a[1:] > a[:-1]).all())
    assert len(subset_indices(10, 100)) == 10
    images, labels = quadrant_images(20)
    es = EvalSet.from_tensors(images, labels, INFO, max_images=5)
    assert len(es) == 5 and es.fingerprint.startswith("quadrants-16px-n5-")


def test_bad_arguments_are_user_errors(evalset, micro):
    from peanchor.core.errors import ConfigError

    with pytest.raises(ConfigError):
        evaluate_model(micro("ape", num_classes=4), evalset, plan(alphas=(1.0, -0.5)), info=INFO, device="cpu", progress=False)
    with pytest.raises(ConfigError):
        evaluate_model(micro("ape", num_classes=4), evalset, plan(rpi_draws=0), info=INFO, device="cpu", progress=False)


# ---- peanchor analyze -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, micro):
    """A run directory as `peanchor train --preset smoke --pe rope` leaves it (weights untrained)."""
    from peanchor.checkpoint.files import save_model
    from peanchor.presets.catalog import resolve_config

    run = tmp_path_factory.mktemp("run")
    config = resolve_config("smoke", {"model.pe": "rope"})
    (run / "config.yaml").write_text(config.to_yaml())
    model = micro("rope", num_classes=10, img_size=16, patch_size=4)
    save_model(model, run / "model.safetensors")
    return run


def test_analyze_command_writes_json_and_csv(run_dir, tmp_path, capsys):
    out = tmp_path / "analysis"
    code = main(["analyze", str(run_dir), "--out", str(out), "--images", "64", "--alphas", "1,0", "--batch-size", "16",
                 "--device", "cpu", "--no-progress"])  # fmt: skip
    assert code == 0
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["num_images"] == 64 and [e["alpha"] for e in doc["alpha_sweep"]] == [1.0, 0.0]
    assert doc["source"]["run_dir"] == str(run_dir) and doc["source"]["data"]["name"] == "scenes"
    assert doc["source"]["model_digest"] and doc["settings"]["batch_size"] == 16
    assert (out / "analysis.csv").exists()
    printed = capsys.readouterr().out
    assert "SSDC RPI" in printed and "ΔSSDC" in printed
    assert "attention distance RPI" in printed and "probe R² RPI" in printed and "held out: 32 of 64" in printed
    lenses = doc["lenses"]
    assert len(lenses["attention_distance"]["manhattan"]["rpi"]) == 2
    assert len(lenses["position_probe"]["col"]["normal"]) == 2


def test_analyze_probe_settings_are_recorded_and_checked(run_dir, tmp_path, capsys):
    out = tmp_path / "probe"
    assert main(["analyze", str(run_dir), "--out", str(out), "--images", "40", "--no-alpha", "--probe-ridge", "0.1",
                 "--probe-holdout", "0.25", "--device", "cpu", "--no-progress"]) == 0  # fmt: skip
    doc = json.loads((out / "analysis.json").read_text())
    assert (doc["settings"]["probe_ridge"], doc["settings"]["probe_holdout"]) == (0.1, 0.25)
    probe = doc["lenses"]["position_probe"]
    assert (probe["fit_images"], probe["heldout_images"]) == (30, 10)
    capsys.readouterr()
    for flag, value in (("--probe-ridge", "0"), ("--probe-holdout", "1"), ("--probe-holdout", "-0.5")):
        assert main(["analyze", str(run_dir), "--out", str(out), flag, value, "--no-progress"]) == 2
        err = capsys.readouterr().err
        key = flag.removeprefix("--").replace("-", "_")  # the plan's key: a flag sets it
        assert err.startswith(f"peanchor: error: analysis.{key}=") and err.count("\n") == 1


def test_analyze_defaults_and_options(run_dir, capsys):
    code = main(["analyze", str(run_dir), "--images", "32", "--no-alpha", "--per-image", "--euclidean",
                 "--rpi-draws", "3", "--set", "analysis.rpi_draws=2", "--device", "cpu", "--no-progress"])  # fmt: skip
    assert code == 0
    doc = json.loads((run_dir / "analysis" / "analysis.json").read_text())  # default --out: RUN_DIR/analysis
    assert doc["alpha_sweep"] == [] and doc["settings"]["ssdc_mode"] == "per_image"
    assert doc["settings"]["metric"] == "euclidean" and len(doc["lenses"]["ssdc"]["rpi_draws"]) == 2  # --set beats
    assert doc["settings"]["max_images"] == 32 and doc["settings"]["batch_size"] == 200  # the run's eval batch size
    assert doc["settings"]["lenses"] == ["ssdc", "position_probe", "attention_distance", "effective_rank"]


def test_analyze_user_errors(tmp_path, capsys):
    assert main(["analyze", str(tmp_path / "nope")]) != 0
    assert "does not exist" in capsys.readouterr().err
    assert main(["analyze"]) != 0
    assert "RUN_DIR" in capsys.readouterr().err


def test_analyze_takes_the_shifts_of_the_runs_preset(run_dir, tmp_path, monkeypatch):
    """A run is measured under its preset's shifts; changing the preset's shifts changes what analyze measures."""
    import dataclasses

    from peanchor.presets import catalog as presets

    own = {"jpeg": {"kind": "jpeg", "quality": 30}, "noise": {"kind": "gaussian_noise", "sigma": 0.1, "seed": 0}}
    monkeypatch.setitem(presets.PRESETS, "smoke", dataclasses.replace(presets.PRESETS["smoke"], shifts=own))
    out = tmp_path / "own"
    assert main(["analyze", str(run_dir), "--out", str(out), "--images", "16", "--no-alpha", "--device", "cpu",
                 "--no-progress"]) == 0  # fmt: skip
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["shifts"] == own and set(doc["fragility"]) == {"jpeg", "noise"}


def test_a_run_away_from_its_presets_resolution_falls_back_to_the_resolution_rule(tmp_path, micro):
    """The smoke preset's shifts are set for 16 px; a smoke run trained at 64 px gets paper_shifts(64) instead."""
    from peanchor.checkpoint.files import save_model
    from peanchor.presets.catalog import PRESETS, resolve_config

    run = tmp_path / "run64"
    run.mkdir()
    (run / "config.yaml").write_text(resolve_config("smoke", {"data.img_size": 64}).to_yaml())
    save_model(micro("none", num_classes=10, img_size=64, patch_size=16), run / "model.safetensors")
    assert main(["analyze", str(run), "--images", "8", "--no-alpha", "--device", "cpu", "--no-progress"]) == 0
    doc = json.loads((run / "analysis" / "analysis.json").read_text())
    assert doc["shifts"] == {k: s.describe() for k, s in paper_shifts(64).items()} != dict(PRESETS["smoke"].shifts)
