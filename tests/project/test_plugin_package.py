"""examples/plugin-package, used as a researcher uses it: "installed" as a dist-info on the path whose entry points
are the ones its pyproject.toml declares, then run from the console script (train --pe, analyze --shift and --set
analysis.lenses.<lens>.<option>, reproduce --jobs 2, report). The math of its shift and its lens is checked against
brute-force references (colorsys, a loop over the attention weights), in process.
"""

from __future__ import annotations

import colorsys
import importlib
import json
import math
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch

from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import resolve_plan
from peanchor.analysis.shifts import Shift, severity_shift
from peanchor.analysis.shifts.base import KINDS
from peanchor.lenses import LENSES
from peanchor.pe import PE_REGISTRY
from peanchor.results.records import read_analysis

from tests.helpers.builders import tiny_info

from tests.helpers.paths import ROOT as REPO

PACKAGE = REPO / "examples" / "plugin-package"
PEANCHOR = shutil.which("peanchor")
MODULES = ("peanchor_example.brightness", "peanchor_example.attention_entropy", "peanchor_example.rowcol")
INFO = tiny_info()


def _entry_points() -> dict[str, dict[str, str]]:
    return tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]["entry-points"]


def install(target: Path) -> Path:
    """What ``pip install`` leaves for peanchor to find: the package's modules and a dist-info whose
    entry_points.txt is the pyproject's (written here, so that no network or build backend is needed)."""
    shutil.copytree(PACKAGE / "src" / "peanchor_example", target / "peanchor_example")
    info = target / "peanchor_example-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: peanchor-example\nVersion: 0.1.0\n")
    groups = "".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()) + "\n"
                     for group, points in _entry_points().items())  # fmt: skip
    (info / "entry_points.txt").write_text(groups)
    return target


def test_the_package_declares_one_plug_in_per_family():
    assert _entry_points() == {"peanchor.shifts": {"brightness": MODULES[0]},
                               "peanchor.lenses": {"attention_entropy": MODULES[1]},
                               "peanchor.pes": {"rowcol": MODULES[2]}}  # fmt: skip


@pytest.fixture
def plugin(monkeypatch):
    """The example's modules imported in this process (as --plugin would), unregistered afterwards."""
    monkeypatch.syspath_prepend(str(PACKAGE / "src"))
    modules = [importlib.import_module(m) for m in MODULES]
    try:
        yield modules
    finally:
        KINDS.pop("brightness", None), LENSES.pop("attention_entropy", None), PE_REGISTRY.pop("rowcol", None)
        for name in [*MODULES, "peanchor_example"]:
            sys.modules.pop(name, None)


def _brightness_reference(image: torch.Tensor, c: float) -> torch.Tensor:
    """ImageNet-C's formula pixel by pixel, in float64 on the 0..255 scale: RGB → HSV (colorsys), V + c clipped to
    1, HSV → RGB."""
    out = torch.empty(image.shape, dtype=torch.float64)
    for i in range(image.shape[1]):
        for j in range(image.shape[2]):
            h, s, v = colorsys.rgb_to_hsv(*(float(x) / 255 for x in image[:, i, j]))
            out[:, i, j] = torch.tensor(colorsys.hsv_to_rgb(h, s, min(v + c, 1.0))).clamp(0, 1) * 255
    return out


@pytest.mark.parametrize("size", [32, 16])
def test_brightness_is_imagenet_c_s_formula(plugin, photos, size):
    images = photos(size)
    images[0, :, :2, :2] = 0  # black pixels: no hue, they turn grey
    for c in (0.1, 0.5):
        got = Shift("brightness", c=c)(images)
        want = torch.stack([_brightness_reference(im, c) for im in images])
        # Rounded to the nearest grey level; c · 255 = 25.5 puts the brightest channel on a tie, either way is right.
        assert (got.double() - want).abs().max() <= 0.5 + 1e-3
    assert Shift("brightness", c=0.0)(images).equal(images)
    assert severity_shift("brightness", 3, 32) == Shift("brightness", c=0.15)  # CIFAR-10-C's row at 32 px
    assert severity_shift("brightness", 5, 224) == Shift("brightness", c=0.5)


def _entropy_reference(weights: torch.Tensor, rows: range) -> float:
    """Mean over images, heads and the chosen query rows of -Σ p log p, one number at a time."""
    total, count = 0.0, 0
    b, h, _, t = weights.shape
    for i in range(b):
        for head in range(h):
            for q in rows:
                total += -sum(float(p) * math.log(float(p)) for p in weights[i, head, q] if p > 0)
                count += 1
    return total / count


def test_the_entropy_accumulator_against_a_loop(plugin):
    from peanchor_example.attention_entropy import EntropyAccumulator

    g = torch.Generator().manual_seed(0)
    weights = [torch.softmax(torch.randn(3, 2, 5, 5, generator=g) * 3, dim=-1) for _ in range(2)]  # (b, H, T, T)
    weights[1][0, 0, 2] = torch.tensor([1.0, 0, 0, 0, 0])  # a row of zeros but one: 0 log 0 = 0
    for queries, rows in (("patches", range(1, 5)), ("prefix", range(0, 1)), ("all", range(0, 5))):
        acc = EntropyAccumulator(depth=3, num_prefix=1, queries=queries)
        for layer, w in enumerate(weights):
            acc.update(layer, w[:2])
            acc.update(layer, w[2:])  # slices of the batch, as the attention sink may hand them
        got = acc.compute()
        assert got[:2].tolist() == pytest.approx([_entropy_reference(w, rows) for w in weights], rel=1e-12)
        assert math.isnan(got[2])  # a layer without weights
        other = EntropyAccumulator(depth=3, num_prefix=1, queries=queries)
        other.update(0, weights[0])
        acc.merge(other)  # a second shard of the same pass
        assert float(acc.compute()[0]) == pytest.approx(_entropy_reference(weights[0], rows), rel=1e-12)
        acc.reset()
        assert acc.count == [0, 0, 0]


def test_the_lens_measures_through_the_passes(plugin, micro):
    """Without a PE the model is permutation-equivariant and a row's entropy does not depend on the key order, so
    the entropy is the same in order and under RPI; its option reaches it through the plan."""
    images = torch.randint(0, 256, (12, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    evalset = EvalSet.from_tensors(images, torch.arange(12) % 3, INFO)
    model = micro("none", num_classes=3)
    for queries in ("patches", "all"):
        plan = resolve_plan(16, given={"alphas": (), "batch_size": 4, "rpi_draws": 2},
                            set_items=[f"analysis.lenses.attention_entropy.queries={queries}"])  # fmt: skip
        record = evaluate_model(model, evalset, plan, info=INFO, device="cpu", progress=False).lens("attention_entropy")
        assert record.queries == queries and len(record.normal) == model.depth
        assert record.rpi == pytest.approx(record.normal, rel=1e-6)  # float32 attention, summed in another order
        tokens = 1 + (16 // 4) ** 2
        assert record.uniform == pytest.approx(math.log(tokens))
        assert all(0 < v <= math.log(tokens) + 1e-9 for v in record.normal)


def test_the_rowcol_pe_adds_row_plus_column(plugin):
    from peanchor.pe import PEContext, create_pe

    pe = create_pe("rowcol", PEContext(embed_dim=8, num_heads=2, depth=1, grid=(2, 3)), init_std=1.0)
    x = torch.randn(2, 1 + 6, 8)
    out = pe.add(x, 0.5)
    for slot in range(6):
        r, c = divmod(slot, 3)
        torch.testing.assert_close(out[:, 1 + slot], x[:, 1 + slot] + 0.5 * (pe.row[r] + pe.col[c]))
    assert out[:, 0].equal(x[:, 0]) and pe.add(x, 0.0).equal(x) and pe.scalable


# ---- the console script, as a user runs it -------------------------------------------------------------------
@pytest.fixture(scope="module")
def env(tmp_path_factory):
    if PEANCHOR is None:
        pytest.skip("the `peanchor` console script is not installed (pip install -e .)")
    site = install(tmp_path_factory.mktemp("site"))
    path = os.pathsep.join(filter(None, [str(REPO), str(site), os.environ.get("PYTHONPATH")]))
    cache = tmp_path_factory.mktemp("cache")
    return {**{k: v for k, v in os.environ.items() if k != "PEANCHOR_PLUGINS"}, "PYTHONPATH": path,
            "PEANCHOR_CACHE": str(cache), "OMP_NUM_THREADS": "1"}  # fmt: skip


def peanchor(env, *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(PEANCHOR), *args], env=env, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, f"peanchor {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    return done


@pytest.mark.slow
def test_installed_it_trains_analyses_and_logs(env, tmp_path):
    from tests.core.test_tracking import events

    help_text = peanchor(env, "analyze", "--help").stdout + peanchor(env, "train", "--help").stdout
    assert "brightness:c=C" in help_text and "rowcol" in help_text
    assert "analysis.lenses.attention_entropy.{queries}" in " ".join(help_text.split())  # --set's help
    run = tmp_path / "run"
    peanchor(env, "train", "--preset", "smoke", "--pe", "rowcol", "--epochs", "1", "--out", str(run), "--no-progress")
    assert json.loads((run / "summary.json").read_text())["pe"] == "rowcol"
    out = peanchor(env, "analyze", str(run), "--shift", "brightness:c=0.3", "--set",
                   "analysis.lenses.attention_entropy.queries=all", "--set", "analysis.alphas=[1, 0]",
                   "--tensorboard", "--no-progress")  # fmt: skip
    assert "attention entropy normal" in out.stdout
    doc = json.loads((run / "analysis" / "analysis.json").read_text())
    assert doc["shifts"]["brightness"] == {"kind": "brightness", "c": 0.3} and "brightness" in doc["acc"]
    assert doc["lenses"]["attention_entropy"]["queries"] == "all" and len(doc["lenses"]["attention_entropy"]["normal"]) == 2
    assert doc["settings"]["lens_options"] == {"attention_entropy": {"queries": "all"}}
    csv = (run / "analysis" / "analysis.csv").read_text()
    assert "attention_entropy_normal" in csv and "attention_entropy_rpi" in csv
    scalars = set(events(run / "analysis" / "tensorboard").Tags()["scalars"])
    assert {"attention_entropy/normal", "attention_entropy/rpi"} <= scalars
    bad = subprocess.run([str(PEANCHOR), "analyze", str(run), "--set",
                          "analysis.lenses.attention_entropy.queries=some"],
                         env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "queries='some'" in bad.stderr


@pytest.mark.slow
def test_installed_it_runs_in_reproduce_workers_and_the_report(env, tmp_path):
    out = tmp_path / "out"
    peanchor(env, "reproduce", "--preset", "smoke", "--conditions", "none,rowcol", "--jobs", "2",
             "--shift", "brightness:severity=3", "--set", "analysis.lenses.attention_entropy.queries=prefix",
             "--out", str(out), "--no-progress")  # fmt: skip
    results = json.loads((out / "results.json").read_text())
    assert [m["pe"] for m in results["models"]] == ["none", "rowcol"]
    for model in results["models"]:
        assert model["attention_entropy"]["queries"] == "prefix" and "brightness" in model["fragility"]
    report = (out / "report.md").read_text()
    assert "attention entropy" in report and "rowcol" in report
    # Not installed, only on the path: --plugin names the modules, for a reader of the files too.
    bare = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), str(PACKAGE / "src")])}
    again = tmp_path / "report"
    flags = [arg for m in MODULES for arg in ("--plugin", m)]
    peanchor(bare, "report", str(out / "results.json"), "--report-dir", str(again), *flags)
    assert "attention entropy" in (again / "report.md").read_text()


@pytest.mark.slow
def test_a_reader_of_the_files_reads_the_plug_in_s_records(env, tmp_path, plugin):
    run = tmp_path / "run"
    peanchor(env, "train", "--preset", "smoke", "--pe", "rowcol", "--epochs", "1", "--out", str(run), "--no-progress")
    peanchor(env, "analyze", str(run), "--shift", "brightness:c=0.2", "--set", "analysis.alphas=[1]", "--no-progress")
    result = read_analysis(run / "analysis")
    assert result.lens("attention_entropy").queries == "patches" and result.shifts["brightness"]["c"] == 0.2
