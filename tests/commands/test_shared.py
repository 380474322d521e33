"""peanchor.commands.shared: a misspelt name on the command line is one line that names the flag and the closest
valid value, said before torch loads (the registries list their names without importing torch); the help texts
name every registered lens; a misspelt ``--set`` key is one line before torch loads."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from peanchor.cli import main
from peanchor.core.errors import did_you_mean

from tests.helpers.paths import ROOT

#: The built-in PEs in the registry's order (the modules of peanchor/pe/ by name; docs/families.md's families too).
ALL_PES = ("none, ape, sincos, alibi, comrope, peg, factorized, fourier, liere, relbias, rope, rope_mixed, rope_ape, "
           "rope_dinov3, string")



def test_did_you_mean_picks_the_closest_or_nothing() -> None:
    from peanchor.data import DATASETS
    from peanchor.pe import PE_NAMES

    assert did_you_mean("rop", PE_NAMES) == " (did you mean rope?)"
    assert did_you_mean("rope_mix", PE_NAMES) == " (did you mean rope_mixed?)"
    assert did_you_mean("cifar", DATASETS.names()) == " (did you mean cifar10?)"
    assert did_you_mean("transformer", PE_NAMES) == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["train", "--pe", "rop"], f"--pe rop: unknown positional encoding; valid: {ALL_PES} (did you mean rope?)"),
        (["train", "--model", "vit_tin"], "--model vit_tin: unknown model; valid: vit_micro, vit_tiny, vit_small, "
                                          "vit_paper (did you mean vit_tiny?)"),
        (["analyze", "RUN", "--data", "scene"], "--data scene: unknown dataset; valid: scenes, imagefolder, cifar10, "
                                                "cifar100, imagenet100, hf, prepared (did you mean scenes?)"),
        (["reproduce", "--conditions", "ape,rop-rpt"], "--conditions: unknown condition 'rop-rpt'; expected a positional "
         f"encoding ({ALL_PES}), 'rpt' (APE trained with RPT) or '<pe>-rpt' "
         "(did you mean rope-rpt?)"),
    ],
)  # fmt: skip
def test_a_misspelt_name_is_one_line_naming_the_flag_before_torch_loads(argv, line, tmp_path) -> None:
    script = ("import io, json, sys, contextlib\nfrom peanchor.cli import main\nerr = io.StringIO()\n"
              "with contextlib.redirect_stderr(err):\n    code = main(sys.argv[1:])\n"
              "print(json.dumps([code, err.getvalue(), 'torch' in sys.modules]))\n")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script, *argv, "--out", str(tmp_path / "o")], capture_output=True,
                         text=True, cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
                         timeout=120, check=True)  # fmt: skip
    code, err, torch_loaded = json.loads(out.stdout)
    assert (code, err) == (2, f"peanchor: error: {line}\n") and not torch_loaded
    assert not (tmp_path / "o").exists()


def test_a_key_given_with_set_keeps_its_name_and_gets_a_suggestion(tmp_path, capsys) -> None:
    assert main(["train", "--preset", "smoke", "--set", "optim.lrr=1", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("peanchor: error: unknown config key 'optim.lrr'; valid keys here: optim.lr,")
    assert err.endswith("(did you mean optim.lr?)\n")
    assert main(["train", "--preset", "smoke", "--set", "model.pe=rop", "--out", str(tmp_path / "o")]) == 2
    assert capsys.readouterr().err.strip().endswith(f"model.pe='rop': unknown positional encoding; valid: {ALL_PES} "
                                                    "(did you mean rope?)")


def test_the_help_texts_name_every_registered_lens(monkeypatch, capsys) -> None:
    from peanchor.cli import build_parser
    from peanchor.lenses import LENSES

    def helps() -> tuple[str, str, str]:
        parser = build_parser()
        sub = next(a for a in parser._actions if a.dest == "command")
        overview = parser.format_help()
        return overview, sub.choices["analyze"].format_help(), sub.choices["reproduce"].format_help()

    overview, analyze, reproduce = (" ".join(h.split()) for h in helps())  # argparse wraps lines
    for name, lens in LENSES.items():
        assert lens.title in analyze and f"({name})" in analyze and lens.title in reproduce
    assert f"analysis.lenses=[{','.join(LENSES)}]" in analyze.replace(" ", "") and "effective rank" in overview
    token_norm = type("TokenNorm", (LENSES["effective_rank"],), {"name": "token_norm", "title": "token norm"})
    monkeypatch.setitem(LENSES, "token_norm", token_norm)  # a lens registered later, gone after the test
    overview, analyze, reproduce = (" ".join(h.split()) for h in helps())
    assert "effective rank (effective_rank), token norm (token_norm)" in analyze
    assert "effective rank and token norm" in reproduce and "effective rank and token norm" in overview


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["analyze", "RUN", "--set", "analysis.lenses.ssdc.bogus=1"], "--set 'analysis.lenses.ssdc.bogus=1': unknown "
         "option analysis.lenses.ssdc.bogus; valid: analysis.lenses.ssdc.mode, analysis.lenses.ssdc.metric, "
         "analysis.lenses.ssdc.bootstrap"),
        (["analyze", "RUN", "--set", "analysis.lenses.ssdc.mod=per_image"], "--set 'analysis.lenses.ssdc.mod=per_image'"
         ": unknown option analysis.lenses.ssdc.mod; valid: analysis.lenses.ssdc.mode, analysis.lenses.ssdc.metric, "
         "analysis.lenses.ssdc.bootstrap (did you mean analysis.lenses.ssdc.mode?)"),
        (["reproduce", "--set", "analysis.rpi_draw=2"], "--set 'analysis.rpi_draw=2': unknown analysis key "
         "'analysis.rpi_draw'; valid keys: analysis.alphas, analysis.rpi_draws, analysis.rpi_mode, analysis.seed, "
         "analysis.batch_size, analysis.max_images, analysis.severities, analysis.ssdc_mode, analysis.metric, "
         "analysis.bootstrap, analysis.bootstrap_groups, analysis.probe_ridge, analysis.probe_holdout, analysis.lenses, analysis.interventions, analysis.sweeps, analysis.resolutions, "
         "and "
         "analysis.lenses.<lens>.<option> (did you mean analysis.rpi_draws?)"),
        (["analyze", "RUN", "--set", "data.val_sise=5"], "unknown config key 'data.val_sise'; valid keys here: "),
        (["train", "--set", "model.pee=rope"], "unknown config key 'model.pee'; valid keys here: model.name, model.pe, "
         "model.pe_kwargs, model.patch_size, model.overrides (did you mean model.pe?)"),
        (["reproduce", "--set", "ape:optim.lrr=1"], "unknown config key 'optim.lrr'; valid keys here: optim.lr, "),
        (["train", "--set", "optim.lr=fast"], "optim.lr=fast: expected float"),
    ],
)  # fmt: skip
def test_a_misspelt_set_key_is_one_line_before_torch_loads(argv, line, tmp_path) -> None:
    """The console script, with ``-X importtime``: the line, the exit code, nothing written, and torch never
    imported (nor numpy)."""
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    script = shutil.which("peanchor")  # the console script, run by this interpreter with -X importtime
    python_script = script is not None and "python" in Path(script).read_text(errors="replace").split("\n", 1)[0]
    command = [script] if python_script else ["-m", "peanchor"]  # not installed (or a shell shim): its module
    out = subprocess.run([sys.executable, "-X", "importtime", *command, *argv, "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)  # fmt: skip
    said = [x for x in out.stderr.splitlines() if not x.startswith("import time:")]
    imported = {x.split("|")[-1].strip() for x in out.stderr.splitlines() if x.startswith("import time:")}
    assert out.returncode == 2 and len(said) == 1 and said[0].startswith(f"peanchor: error: {line}"), said
    assert "peanchor.analysis.plan" in imported  # the real schemas said it (an analysis key: the plan's alone)
    assert "peanchor.training.config" in imported or argv[-1].startswith("analysis.")
    assert not {"torch", "numpy"} & imported and not (tmp_path / "o").exists()


def test_the_plan_the_config_schema_and_the_registries_names_load_without_torch() -> None:
    script = ("import sys\nimport peanchor.analysis.plan, peanchor.training.config, peanchor.data, peanchor.models\n"
              "from peanchor.data import DATASETS\nfrom peanchor.models import MODEL_SIZES\n"
              "from peanchor.pe import PE_NAMES\nassert 'rope' in PE_NAMES and 'scenes' in DATASETS.names()\n"
              "assert 'vit_tiny' in MODEL_SIZES\n"
              "print(sorted(m for m in ('torch', 'numpy', 'pydantic') if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=120,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})  # fmt: skip
    assert out.stdout.strip() == "[]"
