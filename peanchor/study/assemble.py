"""The assembly of a grid's results: ``OUT/results.json`` from the files under ``OUT`` alone.

It reads result files only (the manifest ``reproduce.json``, each cell's ``summary.json``, ``analysis.json`` and
``status/<cell>.json``), never models, so ``peanchor report OUT`` can assemble what sharded runs left behind. A cell
with an analysis is a model; one whose last attempt failed is listed under ``failed``; one never analysed under
``missing``.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.study.cells`, :mod:`peanchor.settings.conditions`, :mod:`peanchor.analysis`
(the manifest's plan), :mod:`peanchor.core.version` and :mod:`peanchor.presets.catalog` (the planned shifts of a manifest written before it recorded its
plan).
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any

from peanchor.settings.conditions import parse_condition, parse_conditions
from peanchor.core.errors import SchemaError
from peanchor.results.records import (
    ANALYSIS_JSON,
    RESULTS_JSON,
    CellId,
    FailedCell,
    ModelResult,
    Results,
    SweepRow,
    TrainSummary,
    read_analysis,
    read_results,
    to_json_dict,
    write_results,
)
from peanchor.study.cells import Cell, grid_cells

__all__ = ["MANIFEST", "assemble_results", "read_json", "update_results"]

MANIFEST = "reproduce.json"


def read_json(path: Path) -> Any:
    """The JSON at ``path``, None if it is absent or unreadable (the grid's own bookkeeping files)."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _newer(a: Path, b: Path) -> bool:
    """Whether file ``a`` exists and was written after ``b``."""
    try:
        return a.stat().st_mtime_ns > b.stat().st_mtime_ns
    except OSError:
        return False


def _versions() -> dict[str, str]:
    import numpy
    import torch
    import torchvision

    from peanchor.core.version import __version__

    return {
        "peanchor": __version__, "torch": torch.__version__, "torchvision": torchvision.__version__,
        "numpy": numpy.__version__, "python": platform.python_version(),
    }  # fmt: skip


def _cells_from_manifest(out: Path, manifest: dict[str, Any] | None) -> tuple[list[Cell], dict[str, Any]]:
    """The grid to assemble: the manifest's, or every run under OUT/runs with an analysis."""
    if manifest:
        conditions = parse_conditions(manifest.get("conditions") or [])
        return grid_cells(conditions, manifest.get("seeds") or [0]), manifest
    cells: list[Cell] = []
    for run_dir in sorted((out / "runs").glob("*")):
        summary = read_json(run_dir / "summary.json")
        if not isinstance(summary, dict) or not (run_dir / "analysis" / ANALYSIS_JSON).exists():
            continue
        cond = parse_condition(str(summary.get("condition", run_dir.name.rsplit("-s", 1)[0])))
        cells.append(Cell(len(cells), cond, int(summary.get("seed", 0))))
    first = read_json(out / "runs" / cells[0].name / "summary.json") if cells else None
    inferred = {
        "preset": (first or {}).get("preset"),
        "conditions": list(dict.fromkeys(c.condition.name for c in cells)),
        "seeds": sorted({c.seed for c in cells}),
        "data": {"name": (first or {}).get("data"), "img_size": (first or {}).get("img_size")},
    }
    return cells, inferred


def _planned_shifts(meta: dict[str, Any], img_size: int) -> tuple[dict[str, Any], dict[str, str]]:
    """The shifts an analysis of this grid would use, and their sources (for a results.json written before any
    analysis): the manifest's plan's, or, for a manifest written before it recorded its plan, the preset's with
    the manifest's ``--shift`` specs."""
    from peanchor.analysis.plan import AnalysisPlan

    recorded = meta.get("analysis")
    if isinstance(recorded, dict) and "shifts" in recorded:
        plan = AnalysisPlan.from_dict(recorded)
        return {k: s.describe() for k, s in plan.shifts.items()}, dict(plan.shift_sources)
    from peanchor.analysis.shift_specs import measured_shifts, parse_shift_specs
    from peanchor.presets.catalog import preset_shifts

    specs = parse_shift_specs(list(meta.get("shifts") or []))
    shifts, sources = measured_shifts(img_size, specs, preset_shifts(meta.get("preset"), img_size))
    return {k: s.describe() for k, s in shifts.items()}, sources


def assemble_results(out: str | Path, wall_seconds: float | None = None) -> Results:
    """The :class:`Results` of the grid under ``out``, from its result files.

    An analysis.json of another schema (an older peanchor's) is a :class:`SchemaError`: one line naming it.
    """
    out = Path(out)
    manifest = read_json(out / MANIFEST)
    cells, meta = _cells_from_manifest(out, manifest if isinstance(manifest, dict) else None)
    results = Results(preset=meta.get("preset"), conditions=list(meta.get("conditions") or []),
                      seeds=list(meta.get("seeds") or []), models=[], wall_seconds=wall_seconds)  # fmt: skip
    compute = 0.0
    for cell in cells:
        run_dir = out / "runs" / cell.name
        status_file = out / "status" / f"{cell.name}.json"
        status = read_json(status_file)
        analysis_file = run_dir / "analysis" / ANALYSIS_JSON
        # An analysis made after the failure (e.g. by hand) wins over the failure.
        if isinstance(status, dict) and status.get("status") == "failed" and not _newer(analysis_file, status_file):
            results.failed.append(FailedCell(name=cell.name, condition=cell.condition.name, seed=cell.seed,
                                             stage=status.get("stage"), error=status.get("error")))  # fmt: skip
            continue
        summary = read_json(run_dir / "summary.json")
        if not analysis_file.exists() or not isinstance(summary, dict):
            results.missing.append(cell.name)
            continue
        analysis = read_analysis(analysis_file)
        if not results.shifts:
            results.shifts, results.shift_sources = analysis.shifts, analysis.shift_sources
        results.severity_table = results.severity_table or analysis.severity_table
        train = TrainSummary(val_acc=summary.get("val_acc"), seconds=summary.get("seconds"), epochs=summary.get("epochs"))
        compute += float(train.seconds or 0.0) + float(analysis.seconds or 0.0)
        c = cell.condition
        identity = CellId(name=cell.name, condition=c.name, pe=c.pe, rpt=c.rpt, seed=cell.seed)
        results.models.append(ModelResult.from_analysis(analysis, identity, train, str(run_dir)))
        results.alpha_sweep += [SweepRow.from_point(p, cell.name, c.name, cell.seed) for p in analysis.alpha_sweep]
    data = meta.get("data") or {}
    results.dataset, results.img_size = data.get("name"), data.get("img_size")
    if not results.shifts and isinstance(results.img_size, int):  # no analysis yet: the shifts it would use
        results.shifts, results.shift_sources = _planned_shifts(meta, results.img_size)
    results.compute_seconds = compute
    results.versions = _versions()
    results.analysis = meta.get("analysis") or None  # the grid's plan (AnalysisPlan.to_dict)
    return results


def _comparable(results: Results) -> str:
    doc = to_json_dict(results)
    return json.dumps({k: v for k, v in doc.items() if k not in ("wall_seconds", "versions")}, sort_keys=True)


def update_results(out: str | Path, wall_start: float | None = None, *, force: bool = False) -> tuple[Results, bool]:
    """Assemble ``OUT/results.json`` and write it when its content changed (or ``force``).
    Returns the results and whether it was written.

    ``wall_seconds`` is the time since ``wall_start`` (``time.perf_counter()``), else the previous file's.
    """
    out = Path(out)
    try:
        previous: Results | None = read_results(out / RESULTS_JSON) if (out / RESULTS_JSON).exists() else None
    except SchemaError:  # an older results.json is simply rewritten
        previous = None
    results = assemble_results(out)
    if not force and previous is not None and _comparable(results) == _comparable(previous):
        return previous, False
    if wall_start is not None:
        results.wall_seconds = time.perf_counter() - wall_start
    else:
        results.wall_seconds = previous.wall_seconds if previous is not None else None
    write_results(results, out / RESULTS_JSON)
    return results, True
