"""``peanchor audit`` on peanchor's ViT: every PE passes every check; each injected PE bug is failed by the check
that names it (docs/audit.md lists the values measured here); the measuring pieces against independent
references; the report, the JSON file and the command line.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable

import pytest
import torch
from torch import nn

import peanchor
from peanchor.audit import CHECKS, AuditReport, audit
from peanchor.audit.checks.axes_in_order import reference_rows
from peanchor.audit.checks.rotary_relative import offset_spread
from peanchor.audit.probes import bright_patch_images, constant_images, probe_r2
from peanchor.cli import main
from peanchor.pe import RotaryTables

# ---- the bugs, injected by editing a healthy model's modules or config ----------------------------------------


class _Rotation(RotaryTables):
    """Rotary tables whose ``apply`` is a buggy one (``how``), kept through ``layer``."""

    how = "no_rotate_half"

    def layer(self, index: int) -> RotaryTables:
        t = super().layer(index)
        return type(self)(t.cos, t.sin, t.groups)

    def apply(self, t: torch.Tensor, num_prefix: int) -> torch.Tensor:
        if self.how == "prefix_rotated":  # CLS rotated as if it sat at the last slot
            cos, sin = (torch.cat((x[..., -1:, :].expand(*x.shape[:-2], num_prefix, -1), x), dim=-2)
                        for x in (self.cos, self.sin))  # fmt: skip
            return RotaryTables(cos, sin, self.groups).apply(t, 0)
        prefix, patches = t[:, :, :num_prefix], t[:, :, num_prefix:]
        if self.how == "no_rotate_half":  # the cos term only: rotate_half dropped
            out = patches * self.cos
        else:  # "interleaved": pairs (2j, 2j+1) rotated by a table laid out for (j, j + hd/2)
            pairs = patches.unflatten(-1, (-1, 2))
            rotated = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
            out = patches * self.cos + rotated * self.sin
        return torch.cat((prefix, out), dim=2)


def _rotation(model: nn.Module, how: str) -> nn.Module:
    kind = type(f"_{how}", (_Rotation,), {"how": how})
    rotary = model.pe.rotary
    model.pe.rotary = lambda alpha: kind(*dataclasses.astuple(rotary(alpha)))  # type: ignore[method-assign]
    return model


def bug_mixed_claimed(micro: Callable) -> nn.Module:
    """The config says rope_mixed; the model runs axial RoPE (the DINOv3-as-axial case of timm PR #2692)."""
    model = micro("rope")
    model.args = dataclasses.replace(model.args, pe="rope_mixed")
    return model


def bug_frequencies(micro: Callable) -> nn.Module:
    """The configured theta is 10000; the table is built with theta 100."""
    model = micro("rope")
    model.pe.theta = 100.0
    model.pe.angles = model.pe._angles(*model.pe.ctx.positions())
    return model


def bug_table_not_added(micro: Callable) -> nn.Module:
    """The table is never added to the tokens (the hook point still offers it)."""
    model = micro("ape")
    model.pe.add = lambda x, alpha: x  # type: ignore[method-assign]
    return model


def bug_axes_swapped(micro: Callable) -> nn.Module:
    """x and y swapped in the rotary builder (dinov2 PR #582, timm's grid_indexing='xy' fix)."""
    model = micro("rope")
    build = model.pe._angles
    model.pe._angles = lambda rows, cols: build(cols, rows)  # type: ignore[method-assign]
    model.pe.angles = model.pe._angles(*model.pe.ctx.positions())
    return model


def bug_no_prefix_row(micro: Callable) -> nn.Module:
    """The table hands out no CLS row although the config gives CLS one."""
    model = micro("ape")
    rows = model.pe.table_rows
    model.pe.table_rows = lambda alpha: (None, rows(alpha)[1])  # type: ignore[method-assign]
    return model


def bug_eager_without_bias(micro: Callable) -> nn.Module:
    """The eager attention path (the one that hands out weights) forgets the relative bias."""
    model = micro("relbias")
    for block in model.blocks:
        eager = block.attn._attention_with_weights
        block.attn._attention_with_weights = lambda q, k, v, bias, sink, eager=eager: eager(q, k, v, None, sink)
    return model


def bug_padded_stem(micro: Callable) -> nn.Module:
    """The patch embedding pads by one pixel: the borders leak position into constant images."""
    model = micro("ape")
    old = model.patch_embed.proj
    new = nn.Conv2d(3, old.out_channels, old.kernel_size, old.stride, padding=1)
    new.load_state_dict(old.state_dict())
    model.patch_embed.proj = new
    return model


def bug_hidden_table(micro: Callable) -> nn.Module:
    """A second table added after block 0, which pe_zero does not reach."""
    model = micro("ape")
    hidden = torch.randn(1, 1 + model.num_patches, model.pe.table.shape[-1])
    model.pe.after_block = lambda i, x, alpha: x + hidden if i == 0 else x  # type: ignore[method-assign]
    return model


def bug_alpha_ignored(micro: Callable) -> nn.Module:
    """The table is added whatever α is."""
    model = micro("ape")
    model.pe.add = lambda x, alpha: x + model.pe.table  # type: ignore[method-assign]
    return model


# (bug id, the case, builder, or a monkeypatch target, the check that must fail)
BUGS = [
    ("mixed_claimed_axial_built", bug_mixed_claimed, "pe_identity"),
    ("frequencies_not_configured", bug_frequencies, "pe_identity"),
    ("table_not_added", bug_table_not_added, "position_reaches"),
    ("rotate_half_dropped", lambda micro: _rotation(micro("rope"), "no_rotate_half"), "rotary_relative"),
    ("wrong_interleave", lambda micro: _rotation(micro("rope"), "interleaved"), "rotary_relative"),
    ("rope_on_prefix", lambda micro: _rotation(micro("rope_mixed"), "prefix_rotated"), "rotary_relative"),
    ("rope_on_prefix", lambda micro: _rotation(micro("rope"), "prefix_rotated"), "prefix_kept"),
    ("axes_swapped", bug_axes_swapped, "axes_in_order"),
    ("cls_row_dropped", bug_no_prefix_row, "prefix_kept"),
    ("eager_path_without_bias", bug_eager_without_bias, "attention_paths"),
    ("padded_stem", bug_padded_stem, "no_hidden_position"),
    ("hidden_table", bug_hidden_table, "no_hidden_position"),
    ("alpha_ignored", bug_alpha_ignored, "alpha_behaves"),
]


@pytest.mark.parametrize("pe", peanchor.PE_NAMES)
def test_every_healthy_pe_passes_every_check(micro: Callable, pe: str) -> None:
    report = audit(micro(pe))
    assert [c.name for c in report.checks] == list(CHECKS)
    assert report.passed, report.table()
    assert all(c.status in ("pass", "n/a") for c in report.checks), report.table()


@pytest.mark.parametrize("bug,build,check", BUGS, ids=[f"{b[0]}-{b[2]}" for b in BUGS])
def test_each_injected_bug_is_failed_by_the_check_that_names_it(micro: Callable, bug: str, build: Callable,
                                                                check: str) -> None:  # fmt: skip
    report = audit(build(micro))
    print(f"\nBUG {bug} | {check} | {report[check].status} | {report[check].measured} | {report[check].message}")
    assert report[check].status == "fail", report.table()
    assert not report.passed


def test_resampling_that_skips_equal_token_counts_is_failed(micro: Callable, monkeypatch: pytest.MonkeyPatch) -> None:
    """timm PR #2737: a resample between grids with the same token count, 4x4 -> 2x8, skipped."""
    from peanchor.interventions.kinds import pe_resample

    real = pe_resample.resample_rows
    monkeypatch.setattr(pe_resample, "resample_rows",
                        lambda rows, old, new, *a: rows if old[0] * old[1] == new[0] * new[1] else real(rows, old, new, *a))  # fmt: skip
    report = audit(micro("ape"))
    print(f"\nBUG equal_count_resample_skipped | resampling | {report['resampling'].status} | "
          f"{report['resampling'].measured} | {report['resampling'].message}")
    assert report["resampling"].status == "fail"
    assert report["axes_in_order"].status == "pass"  # 4x6 has another token count: still resampled


# ---- the measuring pieces against independent references ------------------------------------------------------


def test_offset_spread_equals_a_brute_force_loop() -> None:
    grid = (2, 3)
    logits = torch.randn(2, 6, 6, dtype=torch.float64)
    worst = 0.0
    for b in range(2):
        groups: dict[tuple[int, int], list[float]] = {}
        for i in range(6):
            for j in range(6):
                key = (i // 3 - j // 3, i % 3 - j % 3)
                groups.setdefault(key, []).append(float(logits[b, i, j]))
        worst = max(worst, max(max(v) - min(v) for v in groups.values()))
    assert offset_spread(logits, grid) == pytest.approx(worst / float(logits.abs().max()))
    toeplitz = torch.tensor([[float((i // 3 - j // 3) * 7 + (i % 3 - j % 3)) for j in range(6)] for i in range(6)])
    assert offset_spread(toeplitz, grid) == 0.0  # a function of the offset alone


def test_reference_rows_equal_timm_resample_abs_pos_embed() -> None:
    timm_layers = pytest.importorskip("timm.layers")
    rows = torch.randn(1, 12, 8)
    ours = reference_rows(rows, (3, 4), (5, 2))
    theirs = timm_layers.resample_abs_pos_embed(rows, new_size=(5, 2), old_size=(3, 4), num_prefix_tokens=0,
                                                interpolation="bicubic", antialias=True)  # fmt: skip
    torch.testing.assert_close(ours, theirs)


def test_probe_r2_is_one_for_slot_codes_and_zero_for_constant_tokens() -> None:
    grid = (3, 4)
    code = torch.randn(12, 16)
    colour = torch.randn(6, 1, 16) * 10  # what differs between images must not matter
    assert probe_r2(code[None] + colour, grid) == pytest.approx(1.0, abs=1e-3)
    assert probe_r2(colour.expand(6, 12, 16), grid) == 0.0


def test_probe_images_are_what_they_say() -> None:
    c = constant_images(3, (8, 12))
    assert c.shape == (3, 3, 8, 12) and torch.equal(c, c[:, :, :1, :1].expand_as(c))
    b = bright_patch_images((2, 3), 4, [4])
    assert b.sum() == 3 * 3 * 16 and b[0, :, 4:8, 4:8].eq(3).all()


# ---- the report, the JSON and the command line ----------------------------------------------------------------


def test_report_json_round_trip_and_table(micro: Callable, tmp_path) -> None:
    report = audit(micro("rope"), checks=["pe_identity", "rotary_relative"])
    path = report.save(tmp_path / "audit.json")
    data = json.loads(path.read_text())
    assert data["passed"] is True and [c["name"] for c in data["checks"]] == ["pe_identity", "rotary_relative"]
    assert data["checks"][1]["measured"] == pytest.approx(report["rotary_relative"].measured)
    assert len(report.table().splitlines()) == 4
    assert isinstance(report, AuditReport) and peanchor.audit(micro("rope"), checks=["prefix_kept"]).passed


def test_cli_audits_a_run_directory_and_writes_json(micro: Callable, tmp_path, capsys) -> None:
    from peanchor.checkpoint.files import save_model

    model = micro("sincos")
    save_model(model, tmp_path / "run" / "model.safetensors")
    code = main(["audit", str(tmp_path / "run"), "--json", str(tmp_path / "a.json"), "--check", "pe_identity"])
    out = capsys.readouterr().out
    assert code == 0 and "pe_identity" in out and "passed" in out
    assert json.loads((tmp_path / "a.json").read_text())["checks"][0]["status"] == "pass"


def test_cli_bad_input_is_one_line(tmp_path, capsys) -> None:
    (tmp_path / "empty").mkdir()
    for argv in (["audit"], ["audit", str(tmp_path / "empty")], ["audit", str(tmp_path / "nowhere")],
                 ["audit", str(tmp_path), "--check", "nonsense"]):  # fmt: skip
        assert main(argv) != 0
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and err.startswith("peanchor: error:"), err
        assert argv[-1] != "nonsense" or "the checks: pe_identity, position_reaches" in err


def test_a_model_peanchor_cannot_wrap_is_one_line() -> None:
    with pytest.raises(peanchor.core.errors.ConfigError, match="expected a peanchor model"):
        audit(nn.Linear(2, 2))


def test_the_failing_exit_status_is_one(micro: Callable, monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from peanchor.checkpoint.files import save_model
    from peanchor.commands import audit as command

    save_model(micro("ape"), tmp_path / "run" / "model.safetensors")
    real = command.load_subject
    monkeypatch.setattr(command, "load_subject", lambda args: (bug_alpha_ignored(lambda pe: real(args)[0]), "x"))
    assert main(["audit", str(tmp_path / "run"), "--check", "alpha_behaves"]) == 1


def test_the_benchmark_runs_quick() -> None:
    from tests.helpers.paths import ROOT, import_file

    module = import_file(ROOT / "benchmarks" / "bench_audit.py", "peanchor_bench_audit")
    record = module.main(["--quick", "--no-write"])
    assert all(run["passed"] for run in record["runs"].values()) and record["worst_s"] > 0
