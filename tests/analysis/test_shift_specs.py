"""Shifts chosen on the command line (``--shift KIND:key=value``): every implemented kind is reachable, a spec
replaces the preset's shift of its kind or adds one, the result files record exactly what ran (under the kind's
name, with its source), the report shows every measured shift, and a changed shift invalidates a reused analysis."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from peanchor.analysis.shift_specs import (
    measured_shifts,
    parse_shift_spec,
    parse_shift_specs,
)
from peanchor.analysis.shifts import (
    SEVERITY_TABLES,
    SHIFT_KINDS,
    SHIFT_PARAMS,
    Shift,
    get_kind,
)
from peanchor.cli import main
from peanchor.commands.shared import shift_help
from peanchor.core.errors import ConfigError
from peanchor.presets.catalog import PRESETS, preset_shifts


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A smoke-preset run (16 px scenes, vit_micro), trained for one epoch."""
    root = tmp_path_factory.mktemp("shift_run")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEANCHOR_CACHE", str(root / "cache"))
        assert main(["train", "--preset", "smoke", "--epochs", "1", "--no-progress", "--out", str(root / "run")]) == 0
    return root / "run"


# ---- parsing -------------------------------------------------------------------------------------
def test_the_help_names_every_kind_and_parameter():
    for kind, params in SHIFT_PARAMS.items():
        main = get_kind(kind).main
        assert f"{kind}:{main}=" in shift_help(), kind  # the form --shift needs: the main parameter first
        assert all(f"{p}=" in shift_help() for p in params), (kind, params)
    assert "severity=1..5" in shift_help() and set(SHIFT_PARAMS) == set(SHIFT_KINDS)
    assert "blur:sigma=S[,kernel_size=K]" in shift_help() and "gaussian_noise:sigma=S[,seed=N]" in shift_help()


@pytest.mark.parametrize("kind", SHIFT_KINDS)
def test_every_kind_is_reachable_by_its_parameters_and_by_severity(kind):
    main_param = get_kind(kind).main
    table = SEVERITY_TABLES["cifar-10-c"][kind]
    for severity in range(1, 6):
        shift = parse_shift_spec(f"{kind}:severity={severity}").shift(32)
        row = table[severity - 1]
        expected = row[0] if isinstance(row, tuple) else row  # a row sets the main parameter first
        assert shift.kind == kind and getattr(shift, main_param) == pytest.approx(expected)
    value = {"jpeg": 40, "defocus_blur": 2}.get(kind, 0.5)  # (a radius of 0.5 px is one pixel: no change)
    shift = parse_shift_spec(f"{kind}:{main_param}={value}").shift(32)
    assert getattr(shift, main_param) == value and Shift.from_dict(shift.describe()) == shift
    images = torch.randint(0, 256, (2, 3, 16, 16), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    assert not torch.equal(shift(images), images)  # it does something


def test_severity_follows_the_resolution_table():
    assert parse_shift_spec("jpeg:severity=4").shift(224).quality == SEVERITY_TABLES["imagenet-c"]["jpeg"][3]
    assert parse_shift_spec("blur:severity=2").shift(64).sigma == SEVERITY_TABLES["tiny-imagenet-c"]["blur"][1]
    noise = parse_shift_spec("gaussian_noise:severity=3,seed=7").shift(32)
    assert (noise.sigma, noise.seed) == (SEVERITY_TABLES["cifar-10-c"]["gaussian_noise"][2], 7)
    shot = parse_shift_spec("shot_noise:severity=5,seed=2").shift(224)
    assert (shot.photons, shot.seed) == (SEVERITY_TABLES["imagenet-c"]["shot_noise"][4], 2)
    defocus = parse_shift_spec("defocus_blur:severity=4").shift(64)
    assert (defocus.radius, defocus.alias_blur) == SEVERITY_TABLES["tiny-imagenet-c"]["defocus_blur"][3]


BAD = [
    ("jpeg", "expected KIND:key=value"),
    ("jpg:quality=10", "unknown shift kind 'jpg'; valid: blur (kernel_size, sigma); contrast (factor); defocus_blur"),
    ("jpeg:q=10", "jpeg takes quality or severity=1..5; got 'q'"),
    ("blur:radius=2", "blur takes kernel_size, sigma or severity=1..5; got 'radius'"),
    ("jpeg:quality=0", "jpeg quality must be an integer in 1..100, got 0"),
    ("jpeg:quality=101", "jpeg quality must be an integer in 1..100, got 101"),
    ("jpeg:quality=9.5", "quality='9.5' is not an integer"),
    ("blur:sigma=-1.5", "blur sigma must be a finite number > 0, got -1.5"),
    ("blur:sigma=1,kernel_size=4", "kernel_size must be an odd positive integer"),
    ("blur:kernel_size=5", "blur needs sigma=... (or severity=1..5)"),
    ("gaussian_noise:sigma=0", "sigma must be a finite number > 0"),
    ("contrast:factor=-0.1", "contrast factor must be >= 0"),
    ("pixelate:factor=1.5", "pixelate factor must be in (0, 1]"),
    ("shot_noise:seed=2", "shot_noise needs photons=... (or severity=1..5)"),
    ("shot_noise:severity=2,seed=1.5", "seed='1.5' is not an integer"),
    ("defocus_blur:severity=2,alias_blur=0.3", "give either severity or alias_blur"),
    ("defocus_blur:radius=40", "defocus_blur radius 40 is too large for 32 px images"),
    ("jpeg:severity=6", "severity must be an integer in 1..5"),
    ("jpeg:severity=2,quality=5", "give either severity or quality"),
    ("jpeg:quality=5,quality=6", "quality is given twice"),
]


@pytest.mark.parametrize(("text", "message"), BAD, ids=[t for t, _ in BAD])
def test_a_bad_spec_is_one_clear_error(text, message):
    with pytest.raises(ConfigError) as info:
        parse_shift_specs([text])
    assert str(info.value).startswith(f"--shift {text!r}: ") and message in str(info.value)
    assert "\n" not in str(info.value)


def test_one_shift_per_kind():
    with pytest.raises(ConfigError, match=r"jpeg is already given \('jpeg:quality=10'\); one shift per kind"):
        parse_shift_specs(["jpeg:quality=10", "blur:sigma=1", "jpeg:quality=20"])


def test_a_spec_replaces_the_presets_shift_of_its_kind_or_adds_one():
    specs = parse_shift_specs(["jpeg:quality=10", "contrast:factor=0.3"])
    shifts, sources = measured_shifts(16, specs, preset_shifts("smoke", 16))
    assert list(shifts) == ["jpeg", "blur", "contrast"]  # replaced in place, added at the end
    assert shifts["jpeg"].describe() == {"kind": "jpeg", "quality": 10}
    assert shifts["blur"].describe() == dict(PRESETS["smoke"].shifts["blur"])
    assert sources == {"jpeg": "--shift jpeg:quality=10", "blur": "preset smoke", "contrast": "--shift contrast:factor=0.3"}
    # without a preset at this resolution: the resolution rule, then the specs
    shifts, sources = measured_shifts(224, parse_shift_specs(["blur:severity=5"]))
    assert shifts["jpeg"].quality == 5 and shifts["blur"].sigma == SEVERITY_TABLES["imagenet-c"]["blur"][4]
    assert sources == {"jpeg": "resolution rule (paper)", "blur": "--shift blur:severity=5 (imagenet-c severity 5)"}
    with pytest.raises(ConfigError, match=r"kernel_size 41 is too large for 16 px images"):
        measured_shifts(16, parse_shift_specs(["blur:sigma=2,kernel_size=41"]), preset_shifts("smoke", 16))


# ---- through the CLI -----------------------------------------------------------------------------
def _accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, shift: Shift) -> float:
    """Top-1 under ``shift``, computed here from the model and the shifted pixels (independently of the suite)."""
    from peanchor.data import IMAGENET_MEAN, IMAGENET_STD, normalize

    with torch.no_grad():
        logits = model(normalize(shift(images), IMAGENET_MEAN, IMAGENET_STD))
    return int((logits.argmax(-1) == labels).sum()) / len(labels)


def test_analyze_measures_and_records_exactly_the_shifts_asked_for(run_dir, tmp_path, capsys):
    from peanchor.checkpoint.files import load_model
    from peanchor.data import DataSpec, build_eval_dataset

    out = tmp_path / "analysis"
    argv = ["analyze", str(run_dir), "--no-alpha", "--no-progress", "--severities", "--out", str(out),
            "--shift", "jpeg:quality=10", "--shift", "pixelate:severity=4", "--shift", "gaussian_noise:sigma=0.2"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["shifts"] == {
        "jpeg": {"kind": "jpeg", "quality": 10},
        "blur": dict(PRESETS["smoke"].shifts["blur"]),
        "pixelate": {"kind": "pixelate", "factor": SEVERITY_TABLES["cifar-10-c"]["pixelate"][3]},
        "gaussian_noise": {"kind": "gaussian_noise", "sigma": 0.2, "seed": 0},
    }
    assert doc["shift_sources"]["pixelate"] == "--shift pixelate:severity=4 (cifar-10-c severity 4)"
    assert doc["shift_sources"]["blur"] == "preset smoke"
    for name in doc["shifts"]:  # FS, or null with its reason where the clean accuracy is at chance (a smoke model)
        undefined = (doc.get("fragility_undefined") or {}).get(name)
        assert (doc["fragility"][name] is None and "chance" in undefined) if undefined else \
            doc["fragility"][name] == 1 - doc["acc"][name] / doc["clean_acc"]  # fmt: skip
    # --severities sweeps every measured kind
    assert list(doc["severities"]) == ["jpeg", "blur", "pixelate", "gaussian_noise"]
    assert [s["factor"] for s in doc["severity_shifts"]["pixelate"]] == list(SEVERITY_TABLES["cifar-10-c"]["pixelate"])
    # the accuracies are what the model scores on those pixels
    val, _ = build_eval_dataset(DataSpec(name="scenes", img_size=16, val_size=200))
    images = torch.stack([val[i][0] for i in range(len(val))])
    labels = torch.tensor([val[i][1] for i in range(len(val))])
    model = load_model(run_dir)
    for name, spec in doc["shifts"].items():
        assert doc["acc"][name] == pytest.approx(_accuracy(model, images, labels, Shift.from_dict(spec)), abs=1e-9)
    rows = (out / "analysis.csv").read_text().splitlines()
    assert any(r.startswith("fragility,,,1.0,pixelate,,") for r in rows)  # metric, layer, head, alpha, shift, severity
    printed = capsys.readouterr().out
    assert "pixelate" in printed and "gaussian_noise" in printed


@pytest.mark.parametrize(
    ("command", "spec", "message"),
    [("analyze", "jpg:quality=10", "unknown shift kind 'jpg'; valid: blur (kernel_size, sigma)"),
     ("analyze", "jpeg:quality=101", "jpeg quality must be an integer in 1..100"),
     ("analyze", "blur:sigma=-1", "blur sigma must be a finite number > 0"),
     ("analyze", "blur:sigma=2,kernel_size=41", "kernel_size 41 is too large for 16 px images"),
     ("reproduce", "jpeg:quality=0", "jpeg quality must be an integer in 1..100"),
     ("reproduce", "contrast:strength=2", "contrast takes factor or severity=1..5; got 'strength'"),
     ("reproduce", "blur:sigma=2,kernel_size=41", "kernel_size 41 is too large for 16 px images")],
)  # fmt: skip
def test_a_bad_shift_on_the_command_line_is_one_line_and_writes_nothing(run_dir, tmp_path, capsys, command, spec, message):
    out = tmp_path / "out"
    target = [str(run_dir)] if command == "analyze" else ["--preset", "smoke", "--conditions", "none"]
    code = main([command, *target, "--shift", spec, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code != 0 and len(err) == 1 and err[0].startswith(f"peanchor: error: --shift {spec!r}: "), err
    assert message in err[0]
    assert not out.exists()


@pytest.mark.slow
def test_reproduce_analyses_again_when_the_shifts_change_and_reports_every_shift(tmp_path, capsys):
    out = tmp_path / "grid"
    base = ["reproduce", "--preset", "smoke", "--conditions", "none,ape", "--out", str(out), "--no-progress",
            "--set", "train.epochs=1", "--set", "data.train_size=128", "--set", "data.val_size=64"]  # fmt: skip
    assert main(base) == 0
    first = json.loads((out / "runs" / "ape-s0" / "analysis" / "analysis.json").read_text())
    assert first["shifts"] == {k: dict(v) for k, v in PRESETS["smoke"].shifts.items()}
    capsys.readouterr()
    shifted = [*base, "--shift", "jpeg:quality=10", "--shift", "contrast:factor=0.3"]
    assert main(shifted) == 0
    err = capsys.readouterr().err
    assert "ape-s0: analysed" in err and "none-s0: analysed" in err and "trained," not in err  # runs reused
    results = json.loads((out / "results.json").read_text())
    assert results["shifts"]["jpeg"] == {"kind": "jpeg", "quality": 10} and "contrast" in results["shifts"]
    assert results["shift_sources"]["contrast"] == "--shift contrast:factor=0.3"
    assert all(set(m["fragility"]) == {"jpeg", "blur", "contrast"} for m in results["models"])
    assert all(set(p["fragility"]) == {"jpeg", "blur", "contrast"} for p in results["alpha_sweep"])
    report = (out / "report.md").read_text()
    assert "FS contrast" in report and "--shift jpeg:quality=10" in report and "contrast(factor=0.3)" in report
    assert re.search(r"\| jpeg \| jpeg\(quality=10\) \| --shift jpeg:quality=10 \| jpeg\(quality=5\) \|", report)
    assert main(shifted) == 0  # the same shifts again: everything reused
    assert "analysed" not in capsys.readouterr().err
    manifest = json.loads((out / "reproduce.json").read_text())
    assert manifest["shifts"] == ["jpeg:quality=10", "contrast:factor=0.3"]
    assert manifest["analysis"]["shifts"] == results["shifts"]  # the grid's plan, its shifts resolved
    assert manifest["analysis"]["shift_sources"] == results["shift_sources"] == first.get("shift_sources", {}) | {
        "jpeg": "--shift jpeg:quality=10", "contrast": "--shift contrast:factor=0.3"}  # fmt: skip
