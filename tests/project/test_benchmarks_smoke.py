"""The benchmarks still run and their equality checks hold (tiny sizes; timings are not asserted)."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from tests.helpers.paths import ROOT, import_file

BENCHMARKS = ROOT / "benchmarks"


def load(name: str) -> ModuleType:
    return import_file(BENCHMARKS / f"{name}.py", f"peanchor_bench_{name}")


def test_ssdc_probe_matches_the_paper_style_hooks():
    bench = load("bench_ssdc_probe")
    record = bench.main(["--model", "vit_micro", "--img-size", "16", "--batch", "3", "--reps", "1", "--no-write"])
    assert record["max_abs_diff"] <= bench.TOLERANCE
    assert len(record["ssdc_probe"]) == record["layers"] == 2
    assert record["ratio_probe"] > 0 and record["ratio_paper"] > 0
    assert record["ratio_lenses"] > 0 and len(record["attention_distance"]) == 2 and len(record["probe_r2"]) == 2


def test_per_image_ssdc_equals_scipy_per_image_and_per_layer():
    bench = load("bench_per_image_ssdc")
    record = bench.main(
        [
            "--batch",
            "6",
            "--layers",
            "3",
            "--grid",
            "5",
            "--dim",
            "8",
            "--scipy-images",
            "3",
            "--reps",
            "1",
            "--no-write",
        ]
    )
    assert record["max_abs_diff_per_image"] <= 1e-6
    assert record["max_abs_diff_per_layer"] <= 1e-6
    assert record["scipy_scale"] == 2.0 and record["matrices"] == 18


def test_paper_style_ssdc_uses_the_mean_similarity():
    """The reference approach of bench_ssdc_probe agrees with peanchor's metric on a known input."""
    bench = load("bench_ssdc_probe")
    from peanchor.metrics import SSDCAccumulator

    model = torch.nn.Module()
    model.blocks = torch.nn.ModuleList()  # PaperProbe only reads .blocks to size its buffers
    probe = bench.PaperProbe(model)
    tokens = torch.randn(4, 2, 9, 5, generator=torch.Generator().manual_seed(0))  # (B, L, N, D)
    probe.outputs = [[tokens[:, layer].numpy()] for layer in range(2)]
    acc = SSDCAccumulator((3, 3))
    acc.update(tokens)
    assert abs(probe.ssdc((3, 3)) - acc.compute().numpy()).max() < 1e-9


@pytest.mark.slow  # a benchmark script run end to end: CI runs it
def test_gpu_benchmark_runs_its_code_paths_on_cpu():
    """``bench_gpu.py --quick --device cpu``: the training settings, probe, per-image SSDC and data path."""
    bench = load("bench_gpu")
    record = bench.main(["--quick", "--device", "cpu", "--reps", "1", "--no-write"])
    settings = record["training"]["settings"]
    assert set(settings) == {"fp32", "bf16", "bf16_compile"} and all(s["images_per_s"] > 0 for s in settings.values())
    from peanchor.models import create_model, train_flops

    assert record["training"]["train_flops_per_image"] == train_flops(
        create_model("vit_micro", pe="ape", num_classes=100, img_size=16)
    )
    assert all(s["mfu"] is None for s in settings.values()) and record["peak_flops"] is None  # no CPU peak
    assert record["per_image_ssdc"]["max_abs_diff_per_image"] <= 1e-6
    assert record["ssdc_probe"]["ratio"] > 0
    data = record["data_path"]
    assert data["augment"] == "rrc_flip" and data["ratio_data_to_training"] > 0
    with_peak = bench.main(["--quick", "--device", "cpu", "--reps", "1", "--no-write", "--peak-tflops", "1"])
    mfu = with_peak["training"]["settings"]["fp32"]["mfu"]
    assert mfu == pytest.approx(with_peak["training"]["settings"]["fp32"]["achieved_tflops"] / 1.0)


@pytest.mark.slow  # a benchmark script run end to end: CI runs it
def test_data_benchmark_measures_the_augmented_training_path():
    bench = load("bench_data")
    record = bench.main(["--images", "64", "--reps", "1", "--workers", "0", "--no-write"])
    assert record["augment"] == "rrc_flip" and record["max_pixel_diff_first_image"] == 0
    assert set(record["images_per_s"]) == {"folder_train_w0", "prepared_train_w0", "folder_val_w0", "prepared_val_w0"}
    assert record["ratio_train_best_vs_best"] > 0 and record["ratio_val_best_vs_best"] > 0


def test_interventions_benchmark_checks_its_identity_and_patch():
    record = load("bench_interventions").main(["--model", "vit_micro", "--img-size", "16", "--batch", "2", "--reps",
                                               "1", "--no-write"])  # fmt: skip
    assert record["identity_equal"] and record["patch_gives_clean_logits"]
    assert set(record["ratios"]) == {"pe_zero", "pe_shuffle", "head_ablate", "patch", "rope_planes"}


@pytest.mark.slow  # a benchmark script run end to end: CI runs it
def test_doses_benchmark_checks_its_sweeps_against_separate_calls():
    record = load("bench_doses").main(["--model", "vit_micro", "--img-size", "16", "--batch", "2", "--reps", "1",
                                       "--no-write"])  # fmt: skip
    assert set(record["sweeps"]) == {"head_ablate", "patch", "rope_planes"} and record["layers"] == 12
    assert all(s["equal_to_separate"] and s["ratio"] > 0 for s in record["sweeps"].values())
    assert record["sweeps"]["head_ablate"]["doses"] == record["sweeps"]["patch"]["doses"] == 12


def test_rotary_benchmark_checks_both_rotations_give_the_same_bits():
    from peanchor.pe.base import RotaryTables

    before = RotaryTables.apply
    record = load("bench_rotary").main(["--model", "vit_micro", "--img-size", "16", "--batch", "2", "--reps", "1",
                                        "--no-write"])  # fmt: skip
    assert record["equal_bits"] and set(record["results"]) == {"train", "analysis", "rotation"}
    assert all(r["ratio"] > 0 for r in record["results"].values())
    assert RotaryTables.apply is before  # the benchmark puts the rotation back
