"""A misspelt name on the command line is one line that names the flag and the closest valid value, said before
torch loads; the names read without importing their registries are the registries' own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from peanchor.cli import main
from peanchor.commands.names import dataset_names, model_names, pe_names
from peanchor.errors import did_you_mean

from tests.helpers.paths import ROOT



def test_the_names_are_the_registries() -> None:
    from peanchor.data import DATASETS
    from peanchor.models import MODEL_SIZES
    from peanchor.pe import PE_NAMES

    assert pe_names() == tuple(PE_NAMES) and model_names() == tuple(MODEL_SIZES) and dataset_names() == tuple(DATASETS)


def test_did_you_mean_picks_the_closest_or_nothing() -> None:
    assert did_you_mean("rop", pe_names()) == " (did you mean rope?)"
    assert did_you_mean("rope_mix", pe_names()) == " (did you mean rope_mixed?)"
    assert did_you_mean("cifar", dataset_names()) == " (did you mean cifar10?)"
    assert did_you_mean("transformer", pe_names()) == ""


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["train", "--pe", "rop"], "--pe rop: unknown positional encoding; valid: none, ape, sincos, peg, relbias, rope, "
                                   "rope_mixed (did you mean rope?)"),
        (["train", "--model", "vit_tin"], "--model vit_tin: unknown model; valid: vit_micro, vit_tiny, vit_small, "
                                          "vit_paper (did you mean vit_tiny?)"),
        (["analyze", "RUN", "--data", "scene"], "--data scene: unknown dataset; valid: scenes, imagefolder, cifar10, "
                                                "cifar100, imagenet100, hf, prepared (did you mean scenes?)"),
        (["reproduce", "--conditions", "ape,rop-rpt"], "--conditions: unknown condition 'rop-rpt'; expected a positional "
         "encoding (none, ape, sincos, peg, relbias, rope, rope_mixed), 'rpt' (APE trained with RPT) or '<pe>-rpt' "
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
    assert capsys.readouterr().err.strip().endswith("model.pe='rop': unknown positional encoding; valid: none, ape, "
                                                    "sincos, peg, relbias, rope, rope_mixed (did you mean rope?)")


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
