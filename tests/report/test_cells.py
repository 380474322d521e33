"""A table cell of the report: one seed with its analysis's own interval, seeds summarised, an undefined FS as
the word and its reason, never a number."""

from __future__ import annotations

import math

from peanchor.report.cells import condition_cell, own_interval, sweep_cell
from peanchor.report.summary import summarise
from peanchor.results.records import SCHEMA_VERSION, results_from_dict


def _results(n: int = 1, undefined: bool = False) -> object:
    models, rows = [], []
    for seed in range(n):
        m = {"name": f"ape-s{seed}", "condition": "ape", "pe": "ape", "rpt": False, "seed": seed, "clean_acc": 0.8,
             "rpi_acc": 0.5, "ssdc": {"normal": [0.5, 0.4], "rpi": [0.1, 0.3], "rpi_std": [0, 0],
                                      "rpi_ci": [[0.05, 0.25], [0.15, 0.35]]},
             "delta_ssdc": 0.2, "delta_ssdc_ci": [0.1, 0.3], "acc": {"jpeg": 0.6}, "fragility": {"jpeg": 0.25},
             "clean_acc_ci": [0.78, 0.82], "fragility_ci": {"jpeg": [0.2, 0.3]}}  # fmt: skip
        rows.append({"model": m["name"], "condition": "ape", "seed": seed, "alpha": 0.0, "delta_ssdc": 0.0,
                     "ssdc_rpi": [0.0, 0.0], "clean_acc": 0.1, "acc": {"jpeg": 0.1}, "fragility": {"jpeg": 0.0},
                     "clean_acc_ci": [0.08, 0.12]})  # fmt: skip
        if undefined:
            rows[-1]["fragility"] = {"jpeg": None}
            rows[-1]["fragility_undefined"] = {"jpeg": "clean accuracy not above chance"}
        models.append(m)
    return results_from_dict({"schema": "peanchor.results.records", "schema_version": SCHEMA_VERSION, "models": models,
                              "alpha_sweep": rows})  # fmt: skip


def test_one_seed_shows_its_own_interval():
    m = _results().models
    assert condition_cell(m, "clean_acc", summarise([0.8])) == "0.800 [0.780, 0.820]"
    assert condition_cell(m, "fs_jpeg", summarise([0.25])) == "0.250 [0.200, 0.300]"
    assert own_interval(m[0], "max_ssdc_rpi") == (0.25, 0.35)  # the peak layer's interval
    assert condition_cell(m, "delta_ssdc", summarise([0.2])) == "0.200 [0.100, 0.300]"


def test_seeds_are_summarised_over_seeds_not_by_one_models_interval():
    m = _results(n=2).models
    assert condition_cell(m, "clean_acc", summarise([0.8, 0.8])) == summarise([0.8, 0.8]).cell() == "0.800 ± 0.000"


def test_an_undefined_fs_is_the_word_and_its_reason():
    points = _results(undefined=True).alpha_sweep
    assert sweep_cell(points, "fs_jpeg") == "undefined (clean accuracy not above chance)"
    assert sweep_cell(points, "clean_acc") == "0.100 [0.080, 0.120]"
    assert math.isnan(points[0].fragility["jpeg"])


def test_the_correlation_figure_draws_a_models_own_intervals(tmp_path):
    from peanchor.report.figures import make_figures

    results = _results()
    results.shifts = {"jpeg": {"kind": "jpeg", "quality": 10}}
    figure = next(f for f in make_figures(results, tmp_path) if f.key == "delta_ssdc_vs_fs")
    assert "bars: its analysis's 95% intervals where recorded" in figure.caption and figure.png.is_file()
