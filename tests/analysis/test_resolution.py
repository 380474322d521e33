"""The analysis at other resolutions (peanchor/analysis/resolution.py): the native point is the clean accuracy, a
model without a PE at another size is the model run directly on resized images, the intervals are a paired
bootstrap of the same images, nothing depends on the batch size, and the option changes no other number."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import peanchor
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.resolution import coordinates_convention, grid_correct, resolution_grid
from peanchor.data import normalize
from peanchor.core.errors import ConfigError
from peanchor.interventions import Intervention
from peanchor.interventions.kinds.pe_resample import PEResample, resample_rows
from peanchor.metrics.bootstrap import bootstrap_counts
from peanchor.models import create_model
from peanchor.pe.declaration import PEDeclaration
from peanchor.results.records import read_analysis

STATS = {"mean": (0.5, 0.5, 0.5), "std": (0.25, 0.25, 0.25)}
FAST = {"alphas": (), "progress": False, "shifts": ["jpeg:quality=10"], "rpi_draws": 1}
N = 24


def sharp(model: torch.nn.Module) -> torch.nn.Module:
    """Sharp attention and a unit-normal head, so that the grid visibly changes the predictions."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(20)
        torch.nn.init.normal_(model.head.weight)
    return model


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    """24 random 16 px images."""
    return torch.randint(0, 256, (N, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))


def labelled(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    """Labels the model gets right at its own size on three images of four (so its accuracy is above chance)."""
    with torch.no_grad():
        predicted = model(normalize(images, STATS["mean"], STATS["std"])).argmax(dim=-1)  # (N,)
    wrong = torch.arange(N) % 4 == 3
    return torch.where(wrong, (predicted + 1) % 4, predicted)


@pytest.mark.parametrize("pe", ["ape", "rope", "rope_dinov3", "alibi", "none"])
def test_the_native_size_is_the_clean_accuracy_exactly(micro, images, pe) -> None:
    model = sharp(micro(pe, num_classes=4))
    labels = labelled(model, images)
    result = peanchor.analyze(model, images, labels, resolutions=[8, 16, 24], lenses=["ssdc"], batch_size=8,
                              **STATS, **FAST)  # fmt: skip
    native = result.resolution.point(16)
    assert native.acc == result.clean_acc and native.acc_ci == result.clean_acc_ci
    assert native.relative == 1.0 and native.relative_ci == [1.0, 1.0]
    # the pass of the other sizes, run at the native size (pe_resample to the model's own grid), is the clean pass
    evalset = EvalSet(images, labels, None)
    correct, _ = grid_correct(model, evalset, 16, edits=(), batch_size=8, device=torch.device("cpu"), groups=0,
                              **STATS)  # fmt: skip
    assert correct / N == result.clean_acc
    assert [p.size for p in result.resolution.points] == [8, 16, 24]
    assert [p.grid for p in result.resolution.points] == [[2, 2], [4, 4], [6, 6]]


def test_a_model_without_a_pe_at_another_size_is_the_model_run_on_resized_images(micro, images) -> None:
    model = sharp(micro("none", num_classes=4))
    labels = labelled(model, images)
    result = peanchor.analyze(model, images, labels, resolutions=[24], batch_size=8, **STATS, **FAST)
    # independent path: the same weights built for 24 px images, fed the images resized by hand
    big = create_model("vit_micro", pe="none", num_classes=4, img_size=24).eval()
    big.load_state_dict(model.state_dict())
    x = F.interpolate(normalize(images, STATS["mean"], STATS["std"]), size=(24, 24), mode="bilinear",
                      antialias=True, align_corners=False)  # fmt: skip
    with torch.no_grad():
        hits = big(x).argmax(dim=-1) == labels  # (N,)
    point = result.resolution.point(24)
    assert point.acc == int(hits.sum()) / N
    assert point.acc != result.clean_acc  # the size does change something
    assert point.relative == point.acc / result.clean_acc


def test_the_relative_accuracy_interval_is_a_paired_bootstrap_of_the_same_images(micro, images) -> None:
    model = sharp(micro("ape", num_classes=4))
    labels = labelled(model, images)
    result = peanchor.analyze(model, images, labels, resolutions=[24], batch_size=8, **STATS, **FAST)
    point = result.resolution.point(24)
    # per-image hits at both sizes, through the model's own forward (the 24 px one under pe_resample to 6x6)
    x = normalize(images, STATS["mean"], STATS["std"])
    with torch.no_grad():
        native = (model(x).argmax(dim=-1) == labels).double().numpy()  # (N,)
        moved = model.forward_intermediates(F.interpolate(x, size=(24, 24), mode="bilinear", antialias=True),
                                            Intervention(None, 1.0, (PEResample(grid=(6, 6)),)), layers=0).logits
    other = (moved.argmax(dim=-1) == labels).double().numpy()
    # a loop over the replicates: each resamples the groups (image i in group i mod G) with the analysis's counts
    groups = min(N, 50)
    counts = bootstrap_counts(groups, 200, seed=0).numpy()  # (R, G)
    member = np.arange(N) % groups
    ratios = []
    for row in counts:
        weight = row[member]  # (N,): how often each image's group is drawn
        ratios.append((weight @ other / weight.sum()) / (weight @ native / weight.sum()))
    low, high = np.nanquantile(np.array(ratios), [0.025, 0.975])
    assert point.relative == pytest.approx(other.mean() / native.mean(), abs=1e-12)
    assert point.relative_ci == pytest.approx([low, high], abs=1e-9)
    assert point.acc == other.mean()


def test_pe_resample_of_a_table_to_its_own_grid_is_the_identity(micro, images) -> None:
    table = torch.randn(1, 16, 8)
    assert resample_rows(table, (4, 4), (4, 4), "bicubic", True) is table
    model = micro("ape", num_classes=4)
    x = normalize(images, STATS["mean"], STATS["std"])
    with torch.no_grad():
        moved = model.forward_intermediates(x, Intervention(None, 1.0, (PEResample(grid=(4, 4)),)), layers=0).logits
        assert torch.equal(moved, model(x))


@pytest.mark.parametrize("pe", ["ape", "rope_dinov3"])
def test_no_number_depends_on_the_batch_size(micro, images, pe) -> None:
    model = sharp(micro(pe, num_classes=4))
    labels = labelled(model, images)
    runs = [peanchor.analyze(model, images, labels, resolutions=[8, 24], batch_size=b, **STATS, **FAST).resolution
            for b in (5, 24)]  # fmt: skip
    assert runs[0] == runs[1]


def test_the_option_changes_no_other_number(micro, images) -> None:
    model = sharp(micro("rope", num_classes=4))
    labels = labelled(model, images)
    plain = peanchor.analyze(model, images, labels, batch_size=8, **STATS, **FAST)
    moved = peanchor.analyze(model, images, labels, resolutions=[8, 24], batch_size=8, **STATS, **FAST)
    assert plain.resolution is None and moved.resolution is not None
    kept = {"resolution", "seconds", "timing", "settings", "environment"}
    for f in dataclasses.fields(plain):
        if f.name not in kept:
            assert getattr(plain, f.name) == getattr(moved, f.name), f.name
    assert dataclasses.replace(moved.settings, resolutions=None) == dataclasses.replace(plain.settings)


def test_the_record_travels_through_analysis_json_and_older_files_read_without_it(micro, images, tmp_path) -> None:
    model = sharp(micro("rope", num_classes=4))
    labels = labelled(model, images)
    result = peanchor.analyze(model, images, labels, resolutions=[8], batch_size=8, **STATS, **FAST)
    result.save(tmp_path / "with")
    back = read_analysis(tmp_path / "with")
    assert back.resolution == result.resolution and back.settings.resolutions == [8]
    plain = peanchor.analyze(model, images, labels, batch_size=8, **STATS, **FAST)
    plain.save(tmp_path / "without")
    text = (tmp_path / "without" / "analysis.json").read_text()
    assert '"resolution' not in text  # a file without the option is as before: neither the record nor the setting
    assert read_analysis(tmp_path / "without").resolution is None


def test_each_pe_moves_by_the_convention_it_declares(micro) -> None:
    assert coordinates_convention(micro("rope_dinov3")) == "interpolate"
    for pe in ("ape", "rope", "alibi", "liere", "comrope", "string", "rope_ape", "fourier", "factorized", "none"):
        assert coordinates_convention(micro(pe)) == "extrapolate", pe
    assert PEDeclaration(kinds=("rotary",), other_grids="interpolate").other_grids == "interpolate"

    class Plugin:  # a foreign model whose PE declares nothing extrapolates
        pe = object()

    assert coordinates_convention(Plugin()) == "extrapolate"


def test_bad_sizes_are_one_line(micro, images) -> None:
    model = micro("ape", num_classes=4)
    labels = torch.arange(N) % 4
    with pytest.raises(ConfigError, match=r"^analysis.resolutions: 18 px is not a positive multiple of the model's "
                       r"patch \(4 px"):  # fmt: skip
        peanchor.analyze(model, images, labels, resolutions=[18], **STATS, **FAST)
    with pytest.raises(ConfigError, match="cannot be combined with a pe_resample intervention"):
        peanchor.analyze(model, images, labels, resolutions=[8], interventions=["pe_resample:grid=4x4"], **STATS,
                         **FAST)  # fmt: skip
    with pytest.raises(ConfigError, match=r"analysis.resolutions=\[0\]: expected image sizes in px"):
        peanchor.analyze(model, images, labels, resolutions=[0], **STATS, **FAST)
    assert resolution_grid(40, 32, (4, 4)) == (5, 5)


@pytest.fixture()
def run_dir(tmp_path):
    """A run directory as `peanchor train --preset smoke --pe rope_dinov3` leaves it (untrained, 16 px, patch 4)."""
    from peanchor.checkpoint.files import save_model
    from peanchor.presets.catalog import resolve_config

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(resolve_config("smoke", {"model.pe": "rope_dinov3"}).to_yaml())
    torch.manual_seed(0)
    model = peanchor.create_model("vit_micro", pe="rope_dinov3", num_classes=10, img_size=16).eval()
    save_model(model, run / "model.safetensors")
    return run


def test_the_cli_flag_measures_the_sizes_and_a_bad_one_is_one_line(run_dir, tmp_path, capsys) -> None:
    from peanchor.cli import main

    common = [str(run_dir), "--images", "12", "--no-alpha", "--device", "cpu", "--no-progress"]
    out = tmp_path / "out"
    assert main(["analyze", *common, "--out", str(out), "--resolutions", "8,24"]) == 0
    back = read_analysis(out)
    assert [p.size for p in back.resolution.points] == [8, 16, 24] and back.resolution.coordinates == "interpolate"
    assert back.settings.resolutions == [8, 24]
    capsys.readouterr()
    bad = tmp_path / "bad"
    assert main(["analyze", *common, "--out", str(bad), "--resolutions", "8,x"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--resolutions '8,x': expected comma-separated image sizes in px" in err[0]
    assert not bad.exists()
    # `--interventions` is `--intervention` under another spelling
    plural = tmp_path / "plural"
    assert main(["analyze", *common, "--out", str(plural), "--interventions", "pe_zero"]) == 0
    assert read_analysis(plural).settings.interventions == ["pe_zero:prefix=zero"]


@pytest.mark.parametrize("pe", ["peg", "relbias"])
def test_a_pe_no_edit_can_move_records_its_native_point_and_why(micro, images, pe) -> None:
    model = sharp(micro(pe, num_classes=4))
    labels = labelled(model, images)
    result = peanchor.analyze(model, images, labels, resolutions=[8, 24], batch_size=8, **STATS, **FAST)
    assert [p.size for p in result.resolution.points] == [16] and result.resolution.points[0].acc == result.clean_acc
    assert result.resolution.not_measured.startswith("the other sizes were not measured: pe_resample needs pe.table")
