"""``audit(model, dtype=...)``: the checks that read a timm or transformers model's own forward run it in that
dtype with tolerances by dtype; healthy models pass in bfloat16 and float16, a table that upcasts what the model
hands on fails, and an unsupported dtype is one line."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from peanchor.audit import audit
from peanchor.core.errors import ConfigError

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

from tests.audit.checks.test_reference_parity import APE, EVA, hf_model, timm_model  # noqa: E402
from tests.audit.test_adapters import HF  # noqa: E402


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("build", [lambda: timm_model(EVA), lambda: timm_model(APE), lambda: hf_model(HF["dinov3"]),
                                   lambda: hf_model(HF["dinov2_registers"])],
                         ids=["eva", "ape", "hf-dinov3", "hf-dinov2-reg"])  # fmt: skip
def test_healthy_models_pass_every_check_in_low_precision(build: Any, dtype: str) -> None:
    report = audit(build(), dtype=dtype)
    assert report.passed, report.table()
    assert "bfloat16" in report["reference_parity"].message or "float16" in report["reference_parity"].message


def test_a_table_kept_in_float32_in_a_bf16_run_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """timm #2794 / dinov3 #243 class: what the model hands on silently upcast to float32."""
    import timm.models.vision_transformer as vt

    real = vt.resample_abs_pos_embed
    monkeypatch.setattr(vt, "resample_abs_pos_embed", lambda *a, **k: real(*a, **k).float())
    report = audit(timm_model(APE), dtype="bf16")
    for name in ("pe_identity", "reference_parity"):
        print(f"\nDTYPE timm table float32 in bf16 | {name} | {report[name].status} | {report[name].message}")
        assert report[name].status == "fail" and "float32" in report[name].message, report.table()


def test_the_checks_run_the_model_in_the_audit_s_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    from peanchor.audit import observe

    seen: set[tuple[torch.dtype, torch.dtype]] = set()
    real = observe.TimmObserver.run

    def spy(self: Any, images: torch.Tensor, **kwargs: Any) -> Any:
        seen.add((images.dtype, self.dtype))
        return real(self, images, **kwargs)

    monkeypatch.setattr(observe.TimmObserver, "run", spy)
    own = ["pe_identity", "position_reaches", "axes_in_order", "prefix_kept", "attention_paths",
           "no_hidden_position", "reference_parity"]  # fmt: skip
    report = audit(timm_model(APE), dtype="bf16", checks=own)
    assert report.passed, report.table()
    assert seen == {(torch.bfloat16, torch.bfloat16)}


def test_an_unsupported_dtype_is_one_line() -> None:
    """From the API (the command line's is in tests/commands/test_audit.py)."""
    with pytest.raises(ConfigError, match="fp8.*fp32, bf16, fp16") as e:
        audit(timm_model(APE), dtype="fp8")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
def test_a_dropped_rotation_still_fails_rotary_relative_in_low_precision(monkeypatch: pytest.MonkeyPatch,
                                                                         dtype: str) -> None:  # fmt: skip
    import timm.models.eva as eva

    monkeypatch.setattr(eva, "apply_rot_embed_cat", lambda x, emb, half=False: x * emb.chunk(2, -1)[1].to(x.dtype))
    report = audit(timm_model(EVA), dtype=dtype, checks=["rotary_relative", "reference_parity"])
    print(f"\nDTYPE eva cos only in {dtype} | rotary_relative | {report['rotary_relative'].message}")
    assert report["rotary_relative"].status == "fail" and report["reference_parity"].status == "fail"


def test_a_model_that_cannot_be_wrapped_is_one_line_naming_what_can(capsys: pytest.CaptureFixture) -> None:
    """timm's relative-position ViT is wrapped by no backend: the command says so in one line and names what the
    timm backends wrap (NaFlexViT and BEiT among them)."""
    from peanchor.cli import main

    if not timm.is_model("vit_relpos_small_patch16_224"):
        pytest.skip(f"no VisionTransformerRelPos in timm {timm.__version__}")
    args = ["--timm-arg", "depth=1", "--timm-arg", "embed_dim=64", "--timm-arg", "num_heads=4"]
    assert main(["audit", "--timm", "vit_relpos_small_patch16_224", *args]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "VisionTransformerRelPos" in err[0]
    assert all(name in err[0] for name in ("VisionTransformer ", "Eva", "Beit", "NaFlexVit"))


def test_the_verdicts_do_not_move_with_the_thread_count() -> None:
    before = torch.get_num_threads()
    reports = []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            reports.append(audit(timm_model(EVA)))
    finally:
        torch.set_num_threads(before)
    one, two = ({c.name: c for c in r.checks} for r in reports)
    for name, check in one.items():
        assert check.status == two[name].status, (name, check.message, two[name].message)
        if check.measured is not None:
            assert abs(check.measured - two[name].measured) <= 1e-4, (name, check.measured, two[name].measured)
