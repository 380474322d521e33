"""``peanchor audit``'s options: ``--dtype`` (an unsupported one is one line), a timm model that cannot be wrapped
(one line naming what can), and the zoo (``--timm PATTERN --out FILE``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from peanchor.cli import main

timm = pytest.importorskip("timm")


@pytest.mark.parametrize("argv,says", [
    (["audit", "--timm", "vit_tiny_patch16_224", "--dtype", "fp8"], "invalid choice: 'fp8'"),
    (["audit", "--timm", "resnet18"], "supported: timm.models.vision_transformer.VisionTransformer"),
    (["audit", "--timm", "vit_tiny*"], "needs --out FILE"),
    (["audit", "--timm", "vit_tiny*", "--out", "x", "--check", "pe_identity"], "the zoo takes"),
])  # fmt: skip
def test_bad_input_is_one_line(argv: list[str], says: str, capsys: pytest.CaptureFixture) -> None:
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusal (an unknown --dtype choice)
        code = e.code
    assert code != 0
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("peanchor: error:") and says in err, err


def test_a_timm_model_is_audited_in_bf16(capsys: pytest.CaptureFixture) -> None:
    code = main(["audit", "--timm", "vit_small_patch16_rope_224", "--timm-arg", "img_size=32", "--timm-arg",
                 "patch_size=8", "--timm-arg", "depth=1", "--dtype", "bf16", "--check", "reference_parity"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "bfloat16" in out, out


def test_the_zoo_from_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    code = main(["audit", "--timm", "vit_pe_core_tiny*", "--out", str(tmp_path / "zoo")])
    out = capsys.readouterr().out
    assert code == 0 and "vit_pe_core_tiny_patch16_384: passed" in out, out
    assert (tmp_path / "zoo.md").read_text().count("| vit_pe_core_tiny_patch16_384 |") == 1
