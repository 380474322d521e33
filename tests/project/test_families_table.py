"""`python tools/families_table.py RESULTS`: docs/families.md's two tables (the study's numbers and top-1 at other
resolutions) from a results file, each cell the mean over seeds with a 95 % t-interval, written into a copy of the
page's blocks."""

from __future__ import annotations

import json
import statistics
from types import ModuleType

from scipy import stats

from tests.helpers.claim_results import PAPER_LIKE, claim_results
from tests.helpers.paths import ROOT, import_file
from tests.helpers.resolution_results import ACC, with_resolution


def load_tool() -> ModuleType:
    return import_file(ROOT / "tools" / "families_table.py", "peanchor_tools_families_table")


def write(tmp_path, resolution: bool):
    doc = claim_results({c: PAPER_LIKE[c] for c in ACC})
    path = tmp_path / "results.json"
    path.write_text(json.dumps(with_resolution(doc) if resolution else doc))
    return path


def test_the_resolution_table_is_the_mean_over_seeds_with_its_t_interval(tmp_path) -> None:
    tool = load_tool()
    text = tool.resolution_table(write(tmp_path, True))
    lines = text.splitlines()
    assert lines[0].startswith("| condition | seeds | top-1 8 px (2×2) | top-1 16 px (4×4), native | top-1 24 px (6×6) |")
    rope = next(line for line in lines if line.startswith("| `rope` |")).split(" | ")
    values = [a[0] for a in ACC["rope"]]  # top-1 at 8 px over the seeds
    mean = statistics.mean(values)
    half = stats.t.ppf(0.975, 2) * statistics.stdev(values) / 3**0.5
    assert rope[2] == f"{mean:.3f} [{mean - half:.3f}, {mean + half:.3f}]"
    relative = statistics.mean(a[2] / a[1] for a in ACC["rope"])  # A/A_native at 24 px, the last column
    assert rope[-1].startswith(f"{relative:.3f} [")
    assert tool.resolution_table(write(tmp_path, False)) is None  # results without the record: no table


def test_write_rewrites_both_blocks_of_the_page(tmp_path, monkeypatch) -> None:
    tool = load_tool()
    page = tmp_path / "docs" / "families.md"
    page.parent.mkdir()
    page.write_text(f"intro\n{tool.BEGIN} -->\nold\n{tool.END}\nmiddle\n{tool.RES_BEGIN} -->\nold\n{tool.RES_END}\n")
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    assert tool.main([str(write(tmp_path, True)), "--write"]) == 0
    text = page.read_text()
    assert "old" not in text and text.startswith("intro\n") and "\nmiddle\n" in text
    assert "| `ape` | 3 |" in text.split("middle")[0] and "A/A_native 24 px" in text.split("middle")[1]
