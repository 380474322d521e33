"""``--jobs``: under ``auto`` the fewest of the CPUs (or GPUs) and the cells that fit in the memory available, each
cell's peak estimated from its config; an explicit number is kept, with a warning when it does not fit."""

from __future__ import annotations

import pytest

from peanchor.study.memory import memory_available, plan_jobs


def test_jobs_auto_takes_the_fewest_of_cpus_and_memory():
    plan = plan_jobs(5, 2, True, "2 CPUs", 9e9, 21e9)
    assert (plan.jobs, plan.warning) == (2, None)
    plan = plan_jobs(5, 4, True, "4 CPUs", 9e9, 21e9)  # 21 GB hold two cells of 9 GB, not four
    assert plan.jobs == 2
    assert plan.line == "running 5 cells, 2 at a time (memory: ~9 GB per cell, 21 GB available; 4 CPUs)"
    plan = plan_jobs(5, 4, False, "4 CPUs", 9e9, 21e9)  # an explicit --jobs is kept, with a warning naming the estimate
    assert plan.jobs == 4 and "--jobs 4 runs 4 cells at once at ~9 GB each, but 21 GB is available" in plan.warning
    assert plan_jobs(1, 4, True, "4 CPUs", 30e9, 21e9).warning.startswith("a cell needs ~30 GB, but 21 GB is")
    assert plan_jobs(3, 8, True, "8 CPUs", None, None).jobs == 3  # nothing known about memory: the CPUs decide


def test_memory_available_takes_the_tighter_of_the_host_and_the_cgroup(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24000000 kB\nMemAvailable:   20000000 kB\n")
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    assert memory_available(str(meminfo), str(cgroup)) == 20000000 * 1024
    (cgroup / "memory.max").write_text("8000000000\n")
    (cgroup / "memory.current").write_text("3000000000\n")
    assert memory_available(str(meminfo), str(cgroup)) == 5e9
    (cgroup / "memory.max").write_text("max\n")
    assert memory_available(str(meminfo), str(cgroup)) == 20000000 * 1024


@pytest.mark.slow
def test_the_estimated_peak_of_a_cell_covers_its_measured_peak(tmp_path):
    """Two smoke cells in two workers: their recorded peak resident memory is under the estimate, and the estimate
    is not wildly above it (the base process dominates at this size; for a cpu-preset cell, measured once, 1.23 GB
    against 1.33 GB estimated)."""
    from peanchor.study import ReproduceOptions
    from peanchor.study.executor import attempt_cells
    from peanchor.study.memory import cell_peak_bytes
    from peanchor.settings.conditions import parse_conditions

    options = ReproduceOptions(preset="smoke", out=tmp_path, conditions=parse_conditions("ape,none"), seeds=1, jobs=2,
                               progress=False)  # fmt: skip
    statuses = dict((cell.name, status) for cell, status in attempt_cells(options, options.cells(), print))
    assert all(s["status"] == "ok" for s in statuses.values()), statuses
    measured = max(s["peak_rss_mb"]["process"] for s in statuses.values()) * 2**20
    config = options.cell_config(options.cells()[0])
    estimate = cell_peak_bytes(config, eval_images=config.data.val_size, shifts=2, severities=False, on_gpu=False,
                               cpus=1, num_classes=10, image_files=False)  # fmt: skip
    print(f"smoke cell: measured {measured / 1e9:.2f} GB, estimated {estimate / 1e9:.2f} GB")
    assert measured <= estimate <= 3 * measured
