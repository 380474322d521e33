"""The report's lens section: figures and table from synthetic results with attention distance and the position
probe, sentences that follow the numbers, and results without lens data (older analyses) still reported."""

from __future__ import annotations

import pytest

from peanchor.report import build_report, write_report
from peanchor.report.document import Bullets, Heading, Table
from peanchor.results.records import SCHEMA_VERSION, read_results, results_from_dict, write_results

LAYERS, HEADS = 3, 2
UNIFORM = 2.5  # a 4x4 grid


def model(condition: str, seed: int, lenses: bool = True) -> dict:
    anchored = condition != "none"
    weaker = 0.5 if condition == "rope" else 1.0  # rope anchors less than ape, by every lens
    rpi_probe = [0.95 * weaker, 0.9, 0.8] if anchored else [-0.01, 0.0, 0.01]
    distance = [[1.2 + 0.1 * h + 0.2 * layer for h in range(HEADS)] for layer in range(LAYERS)]
    rpi_distance = distance if anchored else [[2.4, 2.45] for _ in range(LAYERS)]
    out = {
        "name": f"{condition}-s{seed}", "condition": condition, "pe": condition, "rpt": False, "seed": seed,
        "clean_acc": 0.7 + 0.01 * seed, "rpi_acc": 0.5,
        "ssdc": {"normal": [0.6, 0.6, 0.5], "rpi": [0.5, 0.55 * weaker, 0.4] if anchored else [0.0, 0.01, 0.0],
                 "rpi_std": [0.0] * LAYERS},
        "delta_ssdc": 0.05 if anchored else 0.01, "acc": {"jpeg": 0.5, "blur": 0.6}, "fragility": {"jpeg": 0.3, "blur": 0.2},
    }  # fmt: skip
    if lenses:
        out["attention_distance"] = {
            key: {"normal": distance, "rpi": rpi_distance} for key in ("manhattan", "euclidean")
        } | {"prefix_mass": {"normal": [[0.1] * HEADS] * LAYERS, "rpi": [[0.1] * HEADS] * LAYERS},
             "uniform": {"manhattan": UNIFORM, "euclidean": 2.0}}  # fmt: skip
        out["position_probe"] = {
            "row": {"normal": [0.97, 0.95, 0.9], "rpi": rpi_probe},
            "col": {"normal": [0.96, 0.93, 0.9], "rpi": [v + 0.02 for v in rpi_probe]},
            "fit_images": 100, "heldout_images": 100,
        }  # fmt: skip
    return out


def results(lenses: bool = True) -> dict:
    models = [model(c, s, lenses) for c in ("none", "ape", "rope") for s in (0, 1)]
    return {"schema": "peanchor.results.records", "schema_version": SCHEMA_VERSION, "preset": "cpu", "dataset": "scenes",
            "img_size": 32, "shifts": {"jpeg": {"kind": "jpeg", "quality": 30}, "blur": {"kind": "blur", "sigma": 1.0}},
            "models": models}  # fmt: skip


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    res = results_from_dict(results())
    write_results(res, out)
    paths = write_report(read_results(out), out)  # through the file, as `peanchor report` does
    return out, res, paths


def test_lens_figures_are_drawn(written):
    out, _, paths = written
    for stem in ("lenses_per_layer", "attention_distance_heads"):
        for ext in ("png", "pdf"):
            assert (out / "figures" / f"{stem}.{ext}").stat().st_size > 1000
            assert out / "figures" / f"{stem}.{ext}" in paths
    md = (out / "report.md").read_text()
    assert "## Lenses on spatial structure" in md and "figures/lenses_per_layer.png" in md


def test_lens_table_and_sentences_follow_the_numbers(written):
    _, res, _ = written
    doc = build_report(res)
    start = next(i for i, b in enumerate(doc.blocks) if isinstance(b, Heading) and b.text.startswith("Lenses on"))
    table = next(b for b in doc.blocks[start:] if isinstance(b, Table))
    rows = {r[0]: r for r in table.rows}
    header = table.header
    probe_rpi = header.index("max probe R² (RPI)")
    assert rows["none (ablated)"][probe_rpi].startswith("0.020")  # max over layers of (row + col) / 2
    assert rows["ape"][probe_rpi].startswith("0.960")
    distance_rpi = header.index("attn. distance (RPI)")
    assert rows["none (ablated)"][distance_rpi].startswith("2.425")  # mean over layers and heads
    assert "2.50" in (table.caption or "")  # the uniform-attention reference
    bullets = next(b for b in doc.blocks[start:] if isinstance(b, Bullets)).items
    assert any("from 0.020 (`none`) to 0.960 (`ape`)" in s for s in bullets), bullets
    assert any("least for `ape` (by 0.005) and most for `none`" in s for s in bullets), bullets
    assert any("order 3 of 3 pairs" in s for s in bullets), bullets


def test_results_without_lens_data_leave_the_section_out(tmp_path):
    res = results_from_dict(results(lenses=False))
    write_report(res, tmp_path)
    md = (tmp_path / "report.md").read_text()
    assert "Three lenses" not in md and "## Results per condition" in md
    assert not (tmp_path / "figures" / "lenses_per_layer.png").exists()


def test_a_damaged_lens_entry_is_one_line_naming_it(tmp_path):
    from peanchor.core.errors import SchemaError

    doc = results()
    del doc["models"][0]["position_probe"]["col"]
    with pytest.raises(SchemaError, match=r"models\[0\]\.position_probe is missing required key 'col'") as e:
        results_from_dict(doc)
    assert "\n" not in str(e.value)
