"""`peanchor reproduce` end to end on the smoke preset: the results.json schema and its arithmetic, the report,
reuse on rerun, sharding, --list, failed cells, and `peanchor report` from result files only."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest

from peanchor.cli import build_parser, main
from peanchor.core.errors import ConfigError
from peanchor.settings.conditions import CONDITIONS, DEFAULT_CONDITIONS, parse_condition, parse_conditions
from peanchor.presets.catalog import PRESETS
from peanchor.results.records import ANALYSIS_SCHEMA_VERSION
from peanchor.study import ReproduceOptions, grid_cells, list_commands, parse_shard, shard_cells, split_set_items

TOP_KEYS = {"preset", "dataset", "img_size", "shifts", "conditions", "seeds", "models", "alpha_sweep", "failed",
            "wall_seconds", "versions"}  # fmt: skip
MODEL_KEYS = {"name", "condition", "pe", "rpt", "seed", "clean_acc", "ssdc", "delta_ssdc", "acc", "fragility", "train",
              "run_dir", "attention_distance", "position_probe"}  # fmt: skip
SWEEP_KEYS = {"model", "condition", "seed", "alpha", "delta_ssdc", "clean_acc", "acc", "fragility"}


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[Path, int]:
    """One `peanchor reproduce --preset smoke` into a fresh directory: (OUT, exit code). How long it takes is
    benchmarks/bench_reproduce.py's business."""
    out = tmp_path_factory.mktemp("smoke") / "out"
    return out, main(["reproduce", "--preset", "smoke", "--out", str(out), "--no-progress"])


def _copy_runs(src: Path, dst: Path, names: list[str] | None = None) -> None:
    for run in sorted((src / "runs").iterdir()):
        if names is None or run.name in names:
            shutil.copytree(run, dst / "runs" / run.name)


@pytest.mark.slow
def test_smoke_results_schema_and_arithmetic(smoke):
    out, code = smoke
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert TOP_KEYS <= set(results)
    assert results["preset"] == "smoke" and results["dataset"] == "scenes" and results["img_size"] == 16
    assert results["conditions"] == list(DEFAULT_CONDITIONS) and results["seeds"] == [0]
    assert set(results["shifts"]) == {"jpeg", "blur"} and results["failed"] == []
    assert {"peanchor", "torch", "python"} <= set(results["versions"])
    models = {m["name"]: m for m in results["models"]}
    assert sorted(models) == sorted(f"{c}-s0" for c in DEFAULT_CONDITIONS)
    for m in models.values():
        assert MODEL_KEYS <= set(m), m["name"]
        assert m["delta_ssdc"] == m["ssdc"]["rpi"][1] - m["ssdc"]["rpi"][0]
        assert set(m["acc"]) == set(m["fragility"]) == {"jpeg", "blur"}
        undefined = m.get("fragility_undefined") or {}  # FS at chance: null, with its reason
        for k, acc in m["acc"].items():
            assert (m["fragility"][k] is None and m["clean_acc_ci"][0] <= m["chance"]) if k in undefined else \
                m["fragility"][k] == 1 - acc / m["clean_acc"]  # fmt: skip
        assert {"val_acc", "seconds", "epochs"} <= set(m["train"]) and m["train"]["epochs"] == 2
        assert Path(m["run_dir"]).is_dir() and len(m["ssdc"]["normal"]) == len(m["ssdc"]["rpi"]) == 2
    assert models["rpt-s0"]["pe"] == "ape" and models["rpt-s0"]["rpt"] is True
    # The α sweep: ape, sincos and rope (every α of the smoke plan), not none, not rpt.
    swept = {}
    for p in results["alpha_sweep"]:
        assert SWEEP_KEYS <= set(p)
        assert p["delta_ssdc"] == p["ssdc_rpi"][1] - p["ssdc_rpi"][0]
        undefined = p.get("fragility_undefined") or {}  # the α rows carry the rule too
        for k, acc in p["acc"].items():
            assert (p["fragility"][k] is None and "chance" in undefined[k]) if k in undefined else \
                p["fragility"][k] == 1 - acc / p["clean_acc"]  # fmt: skip
        swept.setdefault(p["condition"], []).append(p["alpha"])
    assert swept == {"ape": [1.0, 0.5, 0.0], "sincos": [1.0, 0.5, 0.0], "rope": [1.0, 0.5, 0.0]}
    at_one = {p["model"]: p for p in results["alpha_sweep"] if p["alpha"] == 1.0}
    for name, p in at_one.items():
        assert p["delta_ssdc"] == models[name]["delta_ssdc"] and p["fragility"] == models[name]["fragility"]


@pytest.mark.slow
def test_smoke_report_files(smoke):
    out, _ = smoke
    report = (out / "report.md").read_text()
    figures = re.findall(r"\]\(([^)]+\.(?:png|pdf))\)", report)
    assert figures, "the report references no figure"
    for f in figures:
        assert (out / f).is_file(), f
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and "data:image/png;base64" in html
    # Per-cell analyses are where `peanchor report` reads them.
    for c in DEFAULT_CONDITIONS:
        assert (out / "runs" / f"{c}-s0" / "analysis" / "analysis.json").is_file()
        assert (out / "runs" / f"{c}-s0" / "analysis" / "analysis.csv").is_file()


@pytest.mark.slow
def test_rerun_reuses_everything(smoke, capsys, monkeypatch):
    """A rerun of a finished grid does no work: no training step, no analysis, not a file written (how long it
    takes is benchmarks/bench_reproduce.py's business)."""
    import peanchor.analysis.evaluate
    import peanchor.training.loop

    out, _ = smoke
    work = []
    for module, name in ((peanchor.training.loop, "train_one_epoch"), (peanchor.analysis.evaluate, "evaluate_model")):
        monkeypatch.setattr(module, name, lambda *a, _name=name, **k: work.append(_name))

    def files() -> dict[Path, tuple[int, int]]:
        return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in out.rglob("*") if p.is_file()}

    before = files()
    assert {out / "results.json", out / "report.md", out / "report.html"} <= set(before)
    assert len([p for p in before if p.name in ("model.safetensors", "analysis.json")]) == 2 * len(DEFAULT_CONDITIONS)
    capsys.readouterr()
    code = main(["reproduce", "--preset", "smoke", "--out", str(out), "--no-progress"])
    assert work == [], f"a rerun of a finished grid called {work}"
    assert code == 0 and files() == before
    captured = capsys.readouterr()
    assert "nothing to do" in captured.out and captured.err.count("reused") == len(DEFAULT_CONDITIONS)


@pytest.mark.slow
def test_an_analysis_of_an_older_schema_is_made_again(smoke, tmp_path, capsys):
    """A cell analysed before the lenses existed (schema_version 1) is analysed again; the others are reused."""
    src, _ = smoke
    out = tmp_path / "older"
    _copy_runs(src, out)
    stale = out / "runs" / "ape-s0" / "analysis" / "analysis.json"
    doc = json.loads(stale.read_text())
    doc["schema_version"] = 1
    lenses = doc.pop("lenses")
    doc["ssdc"] = lenses["ssdc"]  # version 1's layout: no lenses beside SSDC, at the top level
    stale.write_text(json.dumps(doc))
    capsys.readouterr()
    assert main(["reproduce", "--preset", "smoke", "--out", str(out), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "ape-s0: analysing again" in err and "schema_version 1" in err
    assert err.count("reused") == len(DEFAULT_CONDITIONS) - 1
    again = json.loads(stale.read_text())
    assert again["schema_version"] == ANALYSIS_SCHEMA_VERSION and again["lenses"]["position_probe"]["row"]["rpi"]


@pytest.mark.slow
def test_conflicting_rerun_is_refused_before_touching_out(smoke, capsys):
    out, _ = smoke
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    capsys.readouterr()
    code = main(["reproduce", "--preset", "smoke", "--out", str(out), "--set", "optim.lr=3e-4", "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "different config" in err[0] and "optim.lr" in err[0]
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()} == before


def test_shards_cover_the_grid_exactly_once():
    names = ["none", "ape", "sincos", "rope", "rpt", "rope_mixed"]
    for k in range(1, len(names) + 1):
        conditions = parse_conditions(names[:k])
        for seeds in (1, 2, 3, 5):
            cells = grid_cells(conditions, seeds)
            assert [c.index for c in cells] == list(range(k * seeds))
            assert len({(c.condition, c.seed) for c in cells}) == k * seeds
            for n in range(1, 9):
                shards = [shard_cells(cells, i, n) for i in range(1, n + 1)]
                flat = sorted(c.index for s in shards for c in s)
                assert flat == list(range(len(cells)))
                sizes = [len(s) for s in shards]
                assert max(sizes) - min(sizes) <= 1  # round-robin: balanced
    with pytest.raises(ConfigError):
        parse_shard("0/2")
    with pytest.raises(ConfigError):
        parse_shard("3/2")
    with pytest.raises(ConfigError):
        parse_shard("x")


def _array_task(task: int, base: int, count: int = 5, step: int = 1) -> dict[str, str]:
    """The variables Slurm sets in task ``task`` of ``--array=<base>-<last>[:step]``."""
    return {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": str(base),
            "SLURM_ARRAY_TASK_MAX": str(base + (count - 1) * step), "SLURM_ARRAY_TASK_COUNT": str(count),
            "SLURM_ARRAY_TASK_STEP": str(step), "SLURM_ARRAY_JOB_ID": "777"}  # fmt: skip


@pytest.mark.parametrize("base, step", [(0, 1), (1, 1), (10, 3)])
def test_a_slurm_array_of_any_base_runs_every_cell_exactly_once(base, step, tmp_path, capsys, monkeypatch):
    """``--shard auto`` in each of 5 array tasks (``--array=0-4``, ``1-5`` or ``10-22:3``) over the paper grid."""
    args = ["reproduce", "--preset", "paper", "--data-root", str(tmp_path), "--out", str(tmp_path / "o"), "--list"]
    assert main(args) == 0
    everything = [line for line in capsys.readouterr().out.splitlines() if line.startswith("peanchor train ")]
    assert len(everything) == 20  # 5 conditions x 4 seeds
    seen: list[str] = []
    for task in range(base, base + 5 * step, step):
        for key, value in _array_task(task, base, step=step).items():
            monkeypatch.setenv(key, value)
        assert main([*args, "--shard", "auto"]) == 0
        seen += [line for line in capsys.readouterr().out.splitlines() if line.startswith("peanchor train ")]
    assert sorted(seen) == sorted(everything) and len(seen) == len(set(seen))


@pytest.mark.parametrize(
    "env, message",
    [
        ({}, "--shard auto needs a Slurm array task's variables (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_MIN, "
             "SLURM_ARRAY_TASK_COUNT not set)"),
        ({"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_MAX": "7",
          "SLURM_ARRAY_TASK_COUNT": "3"}, "is not evenly spaced"),  # --array=1,2,7
        ({"SLURM_ARRAY_TASK_ID": "x", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "3"}, "not integers"),
    ],
)  # fmt: skip
def test_shard_auto_outside_a_regular_array_is_one_clear_error(env, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_shard("auto", env)


def test_a_zero_based_shard_index_says_how_to_use_a_zero_based_array():
    expected = r"shards are numbered from 1 \(1/20 \.\.\. 20/20\); for a 0-based Slurm array \(--array=0-19\) use --shard auto"
    with pytest.raises(ConfigError, match=expected):
        parse_shard("0/20")
    assert parse_shard("20/20") == (20, 20) and parse_shard("AUTO", _array_task(4, 0)) == (5, 5)


def test_jobs_auto_counts_what_this_job_may_use(monkeypatch):
    from peanchor.study import resources
    from peanchor.study.executor import resolve_jobs

    monkeypatch.setattr(resources.os, "sched_getaffinity", lambda pid: {3, 4, 5}, raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU for this job
    assert resolve_jobs("auto", "cpu", None) == 3  # its CPU affinity, not the node's core count
    assert resolve_jobs("auto", "smoke", None) == 1  # cells of seconds: no worker pool
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1f3a,GPU-77b2")  # two GPUs given by Slurm's --gres (UUIDs)
    assert resources.visible_gpus() == ["GPU-1f3a", "GPU-77b2"]
    assert resolve_jobs("auto", "paper", None) == 2 and resolve_jobs("auto", "paper", "cuda") == 2
    assert resolve_jobs("auto", "paper", "cuda:1") == 1 and resolve_jobs("auto", "paper", "cpu") == 3
    assert [resources.gpu_for_worker(k, resources.visible_gpus()) for k in range(5)] == [
        "GPU-1f3a", "GPU-77b2", "GPU-1f3a", "GPU-77b2", "GPU-1f3a"]  # fmt: skip


def test_reproduce_under_torchrun_is_refused_with_what_to_do_instead(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    out = tmp_path / "grid"
    assert main(["reproduce", "--preset", "smoke", "--conditions", "none", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not run under torchrun" in err[0] and "--jobs N" in err[0], err
    assert not out.exists()


def test_list_prints_one_train_command_per_cell(tmp_path, capsys):
    out = tmp_path / "grid"
    args = ["reproduce", "--preset", "smoke", "--seeds", "2", "--conditions", "none,rope,rpt", "--out", str(out),
            "--set", "optim.lr=2e-3", "--set", "rope:optim.pe_lr_mult=5", "--list"]  # fmt: skip
    assert main(args) == 0
    lines = capsys.readouterr().out.splitlines()
    train_lines = [line for line in lines if line.startswith("peanchor train ")]
    assert len(train_lines) == 6
    options = ReproduceOptions(preset="smoke", out=out, conditions=parse_conditions("none,rope,rpt"), seeds=2,
                               set_items=["optim.lr=2e-3", "rope:optim.pe_lr_mult=5"])  # fmt: skip
    parser = build_parser()
    for line, cell in zip(train_lines, options.cells()):
        parsed = parser.parse_args(shlex.split(line)[1:])
        assert Path(parsed.out) == out / "runs" / cell.name
        assert (parsed.pe, parsed.seed, bool(parsed.rpt)) == (cell.condition.pe, cell.seed, cell.condition.rpt)
        # Exactly the config reproduce would train: same preset, flags and --set items.
        from peanchor.presets.catalog import resolve_config

        overrides = {"model.pe": parsed.pe, "train.seed": parsed.seed, "train.rpt": parsed.rpt}
        assert resolve_config(parsed.preset, overrides, parsed.set).to_dict() == options.cell_config(cell).to_dict()
    assert any(line.startswith("peanchor reproduce ") for line in lines)
    assert f"peanchor report {out}" in lines
    assert not out.exists()  # --list does nothing else
    # A shard lists only its own cells.
    assert main([*args, "--shard", "2/4"]) == 0
    shard_lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("peanchor train ")]
    assert shard_lines == [train_lines[1], train_lines[5]]


@pytest.mark.slow
def test_shards_then_report_from_result_files_only(smoke, tmp_path, capsys):
    src, _ = smoke
    out = tmp_path / "sharded"
    _copy_runs(src, out)
    for shard in ("1/2", "2/2"):
        assert main(["reproduce", "--preset", "smoke", "--out", str(out), "--shard", shard, "--no-progress"]) == 0
        assert not (out / "results.json").exists()  # shards leave assembly to `peanchor report`
    for model_file in out.glob("runs/*/model.safetensors"):
        model_file.unlink()  # the report must not need any model
    capsys.readouterr()
    assert main(["report", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    expected = json.loads((src / "results.json").read_text())
    assert [m["name"] for m in results["models"]] == [m["name"] for m in expected["models"]]
    assert results["alpha_sweep"] == expected["alpha_sweep"] and results["failed"] == []
    assert (out / "report.md").is_file() and (out / "report.html").is_file()
    # A results.json file on its own renders too.
    assert main(["report", str(out / "results.json"), "--report-dir", str(tmp_path / "r2")]) == 0
    assert (tmp_path / "r2" / "report.html").is_file()


@pytest.mark.slow
def test_a_failed_cell_is_reported_and_the_others_complete(smoke, tmp_path, capsys):
    src, _ = smoke
    out = tmp_path / "failing"
    _copy_runs(src, out, ["none-s0"])  # reused: only the failing cell trains
    code = main(["reproduce", "--preset", "smoke", "--out", str(out), "--conditions", "none,rpt,ape",
                 "--set", "rpt:optim.lr=1e9", "--no-progress"])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "rpt-s0" in err and "failed" in err
    results = json.loads((out / "results.json").read_text())
    assert [m["name"] for m in results["models"]] == ["none-s0", "ape-s0"]
    (failure,) = results["failed"]
    assert failure["name"] == "rpt-s0" and failure["stage"] == "train" and "TrainingDiverged" in failure["error"]
    assert "rpt-s0" in (out / "report.md").read_text()
    status = json.loads((out / "status" / "rpt-s0.json").read_text())
    assert status["status"] == "failed"


def test_conditions_and_set_prefixes():
    assert parse_condition("rpt") == parse_condition("ape-rpt")
    assert (parse_condition("rpt").pe, parse_condition("rpt").rpt) == ("ape", True)
    assert parse_condition("rpt-rope").name == parse_condition("rope-rpt").name == "rope-rpt"
    assert parse_condition("ROPE_MIXED").name == "rope_mixed"
    with pytest.raises(ConfigError, match="unknown condition"):
        parse_condition("alibi2")
    with pytest.raises(ConfigError):
        parse_conditions(" , ")
    assert [c.name for c in parse_conditions("none,ape,none")] == ["none", "ape"]
    with pytest.raises(ConfigError, match="not a condition"):
        split_set_items(["sincos:optim.lr=1"], parse_conditions("none,ape"))


def test_bad_set_fails_before_any_training(tmp_path, capsys):
    out = tmp_path / "bad"
    assert main(["reproduce", "--preset", "smoke", "--out", str(out), "--set", "optim.nope=1"]) == 2
    assert "optim.nope" in capsys.readouterr().err and not (out / "runs").exists()


def test_default_options_train_the_papers_conditions_with_the_presets_seeds():
    options = ReproduceOptions()
    assert options.out_dir == Path("runs") / f"reproduce-{options.preset}"
    assert [c.name for c in options.conditions] == list(DEFAULT_CONDITIONS)
    assert all(CONDITIONS[c].reference is not None for c in DEFAULT_CONDITIONS)  # the paper ran every one of them
    assert options.seeds == PRESETS[options.preset].seeds
    train_lines = [line for line in list_commands(options) if line.startswith("peanchor train ")]
    assert len(train_lines) == len(options.cells())


def _without_timing(results: dict) -> dict:
    results = json.loads(json.dumps(results))
    results.pop("wall_seconds", None)
    for m in results["models"]:
        m.pop("run_dir", None)
        m.get("source", {}).pop("run_dir", None)  # the model's analysis record names its run directory too
        m.get("train", {}).pop("seconds", None)
        m.pop("analysis_seconds", None)
    return results


@pytest.mark.slow
def test_parallel_jobs_give_the_same_results_as_one_process(smoke, tmp_path, capsys):
    """--jobs 2 runs cells in two spawned single-threaded workers; the numbers must not change."""
    src, _ = smoke
    out = tmp_path / "parallel"
    code = main(["reproduce", "--preset", "smoke", "--out", str(out), "--conditions", "none,sincos,rpt",
                 "--jobs", "2", "--set", "rpt:optim.lr=1e9", "--no-progress"])  # fmt: skip
    assert code == 1  # the diverging cell is reported from its worker like in one process
    assert "running 3 cells, 2 at a time (" in capsys.readouterr().err
    parallel = json.loads((out / "results.json").read_text())
    assert [f["name"] for f in parallel["failed"]] == ["rpt-s0"]
    serial = json.loads((src / "results.json").read_text())
    keep = {"none-s0", "sincos-s0"}
    serial["models"] = [m for m in serial["models"] if m["name"] in keep]
    parallel["models"] = [m for m in parallel["models"] if m["name"] in keep]
    assert _without_timing(parallel)["models"] == _without_timing(serial)["models"]


def test_an_analysis_is_reused_only_for_the_same_weights_data_settings_and_shifts():
    import dataclasses

    from peanchor.analysis.plan import LEGACY_LENSES, LENS_NAMES, AnalysisPlan
    from peanchor.analysis.shifts import Shift
    from peanchor.study.pipeline import reusable
    from peanchor.results.records import AnalysisResult, AnalysisSettings, ModelInfo, SSDCLayers

    shifts = {"jpeg": {"kind": "jpeg", "quality": 58}}
    data = {"name": "scenes", "img_size": 16, "val_size": 200, "train_size": 512, "augment": "auto"}
    # An analysis.json written before its settings recorded max_images and lenses (its source has max_images).
    stored = AnalysisResult(
        clean_acc=0.5, rpi_acc=0.4, lenses={"ssdc": SSDCLayers(normal=[0.6, 0.5], rpi=[0.1, 0.3], rpi_std=[0.0, 0.0])},
        delta_ssdc=0.2, acc={"jpeg": 0.4}, fragility={"jpeg": 0.2}, shifts=shifts, alpha_sweep=[], num_images=200,
        forward_passes=4, passes={}, seconds=1.0, timing={}, model=ModelInfo(pe="ape", depth=2, grid=[4, 4], scalable=True),
        settings=AnalysisSettings(alphas=[1.0, 0.0], rpi_draws=1, seed=0, ssdc_mode="mean_similarity", metric="manhattan",
                                  bootstrap=0, severities=False, batch_size=25, evalset="x", device="cpu",
                                  probe_ridge=1e-3, probe_holdout=0.5),
        source={"model_digest": "abc", "data": {**data, "cache_dir": "/somewhere"}, "max_images": None},
    )  # fmt: skip
    wanted = AnalysisPlan({"jpeg": Shift("jpeg", quality=58)}, {"jpeg": "--shift jpeg:quality=58"}, alphas=[1.0, 0.0],
                          batch_size=25, lenses=LEGACY_LENSES, rpi_mode="per_call", bootstrap=0)  # fmt: skip
    subject = ("abc", {**data, "train_size": 9999})
    assert reusable(stored, wanted, *subject)  # training-only data fields, caches, a shift's source do not matter
    # a file from before per-image RPI and the intervals was made per call, without them: today's defaults redo it
    assert not reusable(stored, dataclasses.replace(wanted, rpi_mode="per_image", bootstrap=200), *subject)
    # ... but today's plan measures a lens the file does not have (the effective rank): it is analysed again
    assert not reusable(stored, dataclasses.replace(wanted, lenses=LENS_NAMES), *subject)
    assert not reusable(stored, wanted, "other", subject[1])
    assert not reusable(stored, wanted, subject[0], {**data, "val_size": 100})
    for change in ({"shifts": {"jpeg": Shift("jpeg", quality=30)}}, {"alphas": [1.0]}, {"batch_size": 50},
                   {"severities": True}, {"max_images": 100}, {"probe_ridge": 1e-2}, {"probe_holdout": 0.25},
                   {"rpi_draws": 2}, {"seed": 1}, {"lenses": ["ssdc"]}, {"metric": "euclidean"}):
        assert not reusable(stored, dataclasses.replace(wanted, **change), *subject), change
    unscalable = dataclasses.replace(stored, model=dataclasses.replace(stored.model, scalable=False),
                                     settings=dataclasses.replace(stored.settings, alphas=[]))  # fmt: skip
    assert reusable(unscalable, wanted, *subject)  # a PE that α does not scale has no sweep, whatever the plan asks
    damaged = dataclasses.replace(stored, shifts={})
    assert not reusable(damaged, wanted, *subject)  # a stored plan that does not read is analysed again
