"""A cell's data loaders: their worker count is capped by the CPUs the cell was given."""

from __future__ import annotations


def test_a_cells_loader_workers_are_capped_by_the_cpus_it_was_given(monkeypatch):
    import torch

    from peanchor.presets.catalog import resolve_config
    from peanchor.training.distributed import DistContext
    from peanchor.training.loaders import CELL_CPUS_ENV, _loader_options

    config = resolve_config("paper", {}, [])  # num_workers=8
    ctx = DistContext(device=torch.device("cpu"))
    monkeypatch.setenv(CELL_CPUS_ENV, "1")
    assert _loader_options(config, ctx)["num_workers"] == 1
    monkeypatch.delenv(CELL_CPUS_ENV)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1}, raising=False)  # a 2-CPU job
    assert _loader_options(config, ctx)["num_workers"] == 2
