"""Analyses compared in one report: the settings that differ in one line; analyses on other images or with other
permutations behind RPI refused in one line that names --allow-mixed, unless allowed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from peanchor.cli import main
from peanchor.core.errors import DataError
from peanchor.report import write_report
from peanchor.report.inputs import gather_items
from peanchor.report.mixing import check_comparable

OLD_ANALYSIS = Path(__file__).parents[1] / "data" / "analysis-v2-three-lenses.json"


def _analysis(root: Path, name: str, **settings) -> Path:
    """A copy of an older analysis.json (no rpi_mode: one permutation per forward call) with ``settings`` changed."""
    doc = json.loads(OLD_ANALYSIS.read_text())
    doc["settings"].update(settings)
    (root / name).mkdir(parents=True)
    (root / name / "analysis.json").write_text(json.dumps(doc))
    return root / name


def test_alike_analyses_pass_and_say_nothing(tmp_path):
    results = gather_items([("a", str(_analysis(tmp_path, "a"))), ("b", str(_analysis(tmp_path, "b")))])
    assert check_comparable(results) is None


def test_a_setting_that_does_not_change_the_estimand_is_named_in_one_line(tmp_path):
    a, b = _analysis(tmp_path, "a"), _analysis(tmp_path, "b", bootstrap=200, device="cuda")
    line = check_comparable(gather_items([("a", str(a)), ("b", str(b))]))
    assert line == "settings that differ between the analyses compared: bootstrap (0: a-s0; 200: b-s0)"


@pytest.mark.parametrize(("settings", "named"), [
    ({"batch_size": 500}, "different permutations behind RPI (batch_size differs)"),  # per call: the batch sets them
    ({"seed": 1}, "different permutations behind RPI (seed differs)"),
    ({"evalset": "scenes-16px-n100-0123456789abcdef"}, "different images (evalset differs)"),
])  # fmt: skip
def test_other_images_or_other_permutations_are_refused_unless_allowed(tmp_path, settings, named):
    results = gather_items([("a", str(_analysis(tmp_path, "a"))), ("b", str(_analysis(tmp_path, "b", **settings)))])
    with pytest.raises(DataError, match="pass --allow-mixed") as caught:
        check_comparable(results)
    assert named in str(caught.value) and "\n" not in str(caught.value)
    line = check_comparable(results, allow_mixed=True)
    assert line is not None and line.startswith("settings that differ") and "\n" not in line
    with pytest.raises(DataError, match="allow_mixed=True"):
        write_report(results, tmp_path / "report")
    assert not (tmp_path / "report").exists()  # nothing written


def _grid(tmp_path: Path, a: dict, b: dict):
    """Two models of a results.json whose analysis settings are ``a`` and ``b`` over the old file's."""
    results = gather_items([("a", str(_analysis(tmp_path, "a"))), ("b", str(_analysis(tmp_path, "b")))])
    for model, settings in zip(results.models, (a, b)):
        model.analysis_settings = {**model.analysis_settings, **settings}
    return results


def test_with_a_permutation_per_image_the_batch_size_does_not_matter(tmp_path):
    results = _grid(tmp_path, {"rpi_mode": "per_image"}, {"rpi_mode": "per_image", "batch_size": 500})
    line = check_comparable(results)
    assert line == "settings that differ between the analyses compared: batch_size (25: a-s0; 500: b-s0)"


def test_another_rpi_mode_is_refused_and_an_older_file_reads_as_per_call(tmp_path):
    with pytest.raises(DataError, match=r"different permutations behind RPI \(rpi_mode differs\)"):
        check_comparable(_grid(tmp_path, {}, {"rpi_mode": "per_image"}))
    assert check_comparable(_grid(tmp_path / "again", {}, {"rpi_mode": "per_call"})) is None


def test_the_report_command_refuses_a_mix_in_one_line_and_writes_with_the_flag(tmp_path, capsys):
    a, b = _analysis(tmp_path, "a"), _analysis(tmp_path, "b", batch_size=500)
    out = tmp_path / "report"
    assert main(["report", f"ape={a}", f"rope={b}", "--report-dir", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--allow-mixed" in err and not out.exists()
    assert main(["report", f"ape={a}", f"rope={b}", "--report-dir", str(out), "--allow-mixed"]) == 0
    printed = capsys.readouterr().out
    assert "settings that differ between the analyses compared: batch_size (25: ape-s0; 500: rope-s0)" in printed
    assert (out / "report.md").is_file()
    shutil.rmtree(out)
