"""The report's provenance table and title: read from the result files only (each model's record, its run's
config.yaml), naming data, interventions, settings and environment; "not recorded" where an older file lacks it."""

from __future__ import annotations

import copy

from peanchor.report.prose import build_report
from peanchor.report.provenance import provenance_table, setting_text
from peanchor.results.records import SCHEMA_VERSION, results_from_dict

ARGS = {"name": "vit_tiny", "pe": "ape", "img_size": 32, "patch_size": 8, "embed_dim": 128, "depth": 3, "num_heads": 4}
SETTINGS = {"alphas": [1.0, 0.0], "rpi_draws": 1, "seed": 0, "batch_size": 25, "bootstrap": 200,
            "ssdc_mode": "mean_similarity", "interventions": ["pe_zero:prefix=zero"], "rpi_mode": "per_image",
            "evalset": "scenes-32px-n1000-0123", "device": "cpu"}  # fmt: skip
ENV = {"peanchor": "0.1.0", "torch": "2.5.0", "python": "3.11.7", "cpu_capability": "AVX2", "device": "cpu",
       "git_commit": "abc123"}  # fmt: skip


def _model(cond: str, seed: int, run_dir: str = "", record: bool = True) -> dict:
    m = {"name": f"{cond}-s{seed}", "condition": cond, "pe": cond, "rpt": False, "seed": seed, "clean_acc": 0.6,
         "rpi_acc": 0.5, "ssdc": {"normal": [0.5, 0.4], "rpi": [0.1, 0.2], "rpi_std": [0, 0]}, "delta_ssdc": 0.1,
         "acc": {"jpeg": 0.5}, "fragility": {"jpeg": 1 / 6}, "run_dir": run_dir}  # fmt: skip
    if record:
        m |= {"source": {"model_args": {**ARGS, "pe": cond}, "data": {"name": "scenes", "img_size": 32}},
              "analysis_settings": SETTINGS, "environment": ENV, "num_images": 1000}
    return m


def _results(models: list[dict]) -> dict:
    return {"schema": "peanchor.results.records", "schema_version": SCHEMA_VERSION, "models": models,
            "shifts": {"jpeg": {"kind": "jpeg", "quality": 10}}}  # fmt: skip


def _rows(doc: dict) -> dict[str, str]:
    return {row[0]: row[1] for row in provenance_table(results_from_dict(doc)).rows}


def test_the_table_reads_every_fact_from_the_records_and_the_runs_config(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.yaml").write_text("data: {name: scenes, train_size: 6000}\n"
                                                 "train: {epochs: 6, batch_size: 64}\n")  # fmt: skip
    rows = _rows(_results([_model("ape", 0, str(tmp_path / "run")), _model("ape", 1, str(tmp_path / "run"))]))
    assert rows["seeds"] == "0, 1"
    assert rows["model"] == "vit_tiny, depth 3, width 128, heads 4, patch 8, grid 4x4"
    assert rows["data"] == "scenes, 32 px, 1000 evaluation images"
    assert rows["interventions"] == "pe_zero:prefix=zero"
    assert rows["training budget"] == "6 epochs, batch 64, 6000 training images"
    assert rows["analysis"] == ("RPI per_image, 1 draw(s), seed 0, batch 25, 2 α points, bootstrap 200, "
                                "SSDC mean_similarity")  # fmt: skip
    assert rows["versions"] == "peanchor 0.1.0, torch 2.5.0, python 3.11.7"
    assert (rows["commit"], rows["kernels"]) == ("abc123", "AVX2 (cpu)")


def test_facts_that_differ_are_listed_by_who_has_them_and_older_files_say_not_recorded():
    rope = _model("rope", 0)
    rope["analysis_settings"] = {**SETTINGS, "interventions": []}
    rows = _rows(_results([_model("ape", 0), rope, _model("none", 0, record=False)]))
    assert rows["interventions"] == "none, rope: none; ape: pe_zero:prefix=zero"  # in the report's order of conditions
    assert rows["kernels"] == "none: not recorded; ape, rope: AVX2 (cpu)"
    assert rows["model"].startswith("none: not recorded; ")


def test_the_title_names_the_data_and_the_interventions():
    doc = _results([_model("ape", 0)])
    assert setting_text(results_from_dict(doc)) == "scenes, 32 px, 1000 evaluation images; under pe_zero:prefix=zero"
    report = build_report(results_from_dict(doc))
    assert report.title == "peanchor report: scenes, 32 px, 1000 evaluation images; under pe_zero:prefix=zero"
    assert report.blocks[0].text == "What was run"
    plain = copy.deepcopy(doc)
    plain["models"][0]["analysis_settings"] = {**SETTINGS, "interventions": []}
    assert build_report(results_from_dict(plain)).title == "peanchor report: scenes, 32 px, 1000 evaluation images"


def test_analyses_gathered_without_a_grid_keep_the_data_they_agree_on(tmp_path):
    import json
    from pathlib import Path

    from peanchor.report.inputs import gather_items

    old = Path(__file__).parents[1] / "data" / "analysis-v2-three-lenses.json"
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "analysis.json").write_text(old.read_text())
    results = gather_items([("ape", str(tmp_path / "a")), ("rope", str(tmp_path / "b"))])
    assert (results.dataset, results.img_size) == ("scenes", 16)
    assert json.loads(old.read_text())["source"]["data"]["name"] == "scenes"


def test_the_title_says_which_conditions_ran_under_an_intervention_when_not_all_did():
    rope = _model("rope", 0)
    rope["analysis_settings"] = {**SETTINGS, "interventions": []}
    assert setting_text(results_from_dict(_results([_model("ape", 0), rope]))) == (
        "scenes, 32 px, 1000 evaluation images; under pe_zero:prefix=zero (ape)")
