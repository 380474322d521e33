"""`peanchor analyze` keeps what it has written and says what it measured: an analysis made with other settings is
never replaced (written beside it, or refused for an --out given), the same settings rewrite it, and the console
header, the record and the repr name the data, the interventions and the environment."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from peanchor.cli import main
from peanchor.results.records import read_analysis

FAST = ["--images", "12", "--no-alpha", "--no-progress", "--shift", "jpeg:quality=10"]


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """A smoke run (10 classes, 16 px), trained in-process."""
    out = tmp_path_factory.mktemp("record") / "run"
    assert main(["train", "--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    return out


def test_another_settings_analysis_is_written_beside_and_the_same_settings_rewrite(run, capsys):
    assert main(["analyze", str(run), *FAST, "--batch-size", "4"]) == 0
    first = (run / "analysis" / "analysis.json").read_bytes()
    capsys.readouterr()
    assert main(["analyze", str(run), *FAST, "--batch-size", "6"]) == 0
    printed = capsys.readouterr().out
    assert f"{run / 'analysis'} holds an analysis made with other settings (batch_size 4 → 6)" in printed
    assert (run / "analysis" / "analysis.json").read_bytes() == first  # untouched
    assert read_analysis(run / "analysis-2").settings.batch_size == 6
    # the same settings again: each rewrites its own, no third directory
    assert main(["analyze", str(run), *FAST, "--batch-size", "6"]) == 0
    assert main(["analyze", str(run), *FAST, "--batch-size", "4"]) == 0
    assert not (run / "analysis-3").exists()
    assert read_analysis(run / "analysis").settings.batch_size == 4


def test_a_hook_by_its_module_runs_from_the_command_line_and_its_record_reads_back(run, tmp_path, monkeypatch,
                                                                                   capsys):  # fmt: skip
    """``--intervention hook:point=...,fn=MODULE:NAME`` imports the researcher's module before the first pass; the
    record names the function and reads back, so the same command rewrites its own analysis; a lambda's record
    (written from Python) reads back too, and is neither run nor replaced."""
    import peanchor
    from peanchor.interventions import Hook

    (tmp_path / "lab_hooks.py").write_text("def double(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "hooked"
    spec = "hook:point=blocks.0.mlp,fn=lab_hooks:double"
    assert main(["analyze", str(run), *FAST, "--intervention", spec, "--out", str(out)]) == 0, capsys.readouterr().err
    first = read_analysis(out)
    assert first.settings.interventions == [spec]
    assert main(["analyze", str(run), *FAST, "--intervention", spec, "--out", str(out)]) == 0  # the same settings
    assert read_analysis(out).settings.interventions == [spec] and not (tmp_path / "hooked-2").exists()
    assert main(["analyze", str(run), *FAST, "--intervention", "hook:point=blocks.0.mlp,fn=lab_hooks:nothing",
                 "--out", str(tmp_path / "bad")]) == 2  # fmt: skip
    assert capsys.readouterr().err.strip() == ("peanchor: error: hook function lab_hooks:nothing could not be "
                                               "imported: AttributeError: module 'lab_hooks' has no attribute "
                                               "'nothing'")  # fmt: skip
    assert not (tmp_path / "bad").exists()
    model = peanchor.load_model(run)
    peanchor.analyze(model, "scenes", max_images=12, interventions=[Hook("blocks.0.mlp", lambda x: x)], alphas=[],
                     shifts=["jpeg:quality=10"], progress=False).save(tmp_path / "by-lambda")  # fmt: skip
    assert main(["analyze", str(run), *FAST, "--out", str(tmp_path / "by-lambda")]) == 2  # read back, not replaced
    assert "holds an analysis made with other settings" in capsys.readouterr().err


def test_an_out_given_that_holds_other_settings_is_refused_in_one_line(run, tmp_path, capsys):
    out = tmp_path / "mine"
    assert main(["analyze", str(run), *FAST, "--out", str(out)]) == 0
    before = (out / "analysis.json").read_bytes()
    capsys.readouterr()
    assert main(["analyze", str(run), *FAST, "--seed", "3", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "seed 0 → 3" in err and "give another --out DIR" in err
    assert (out / "analysis.json").read_bytes() == before


def test_the_header_record_and_repr_name_data_interventions_and_environment(tmp_path, capsys):
    run, out = tmp_path / "ape", tmp_path / "zeroed"
    assert main(["train", "--preset", "smoke", "--set", "model.pe=ape", "--out", str(run), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["analyze", str(run), *FAST, "--intervention", "pe_zero", "--out", str(out)]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert header == "  data: scenes, 12 images, 16 px; interventions: pe_zero:prefix=zero"
    result = read_analysis(out)
    assert list(result.settings.interventions) == ["pe_zero:prefix=zero"]
    assert "data scenes, 12 images, 16 px; interventions pe_zero:prefix=zero" in repr(result)
    assert "interventions pe_zero" in result._repr_html_()
    env = result.environment
    assert env["torch"] == torch.__version__ and env["device"] == "cpu"
    assert env["cpu_capability"] == str(torch.backends.cpu.get_cpu_capability())
    assert set(env) >= {"peanchor", "python"}


def test_an_undefined_fs_reads_as_undefined_with_its_reason_in_the_console_and_the_repr():
    from peanchor.commands.analyze import summary_text

    result = read_analysis(Path(__file__).parents[1] / "data" / "analysis-v2-three-lenses.json")
    shift = next(iter(result.fragility))
    result.fragility[shift] = float("nan")
    result.fragility_undefined = {shift: "clean accuracy 0.10 not above chance 0.10"}
    point = result.alpha_sweep[-1]
    point.fragility[shift] = float("nan")
    point.fragility_undefined = {shift: "clean accuracy at chance"}
    text = summary_text(result, "m")
    assert "(FS undef.)" in text and f"FS {shift}: undefined, clean accuracy 0.10 not above chance 0.10" in text
    assert f"FS undefined at α = {point.alpha:g}, {shift}: clean accuracy at chance" in text and "undef." in text
    assert f"FS {shift} undefined: clean accuracy 0.10 not above chance 0.10" in repr(result)
    assert "undefined: clean accuracy 0.10" in result._repr_html_()
