"""What a report is made of: analyses and grids, given as objects or as paths, gathered into one
:class:`~peanchor.results.records.Results`.

:func:`as_results` takes analyses in memory (one, a list, a mapping ``name → result`` or ``name → [results over
seeds]``); :func:`gather` also takes paths (an analysis directory or ``analysis.json``, a run directory analysed by
``peanchor analyze``, a ``results.json`` or the reproduce directory holding it) and grids (``Results``), with names
given or inferred. ``peanchor report PATH...`` and ``peanchor.write_report`` read through :func:`gather`.

Names. A name given for an analysis is its condition in the report (``ape``, ``rope``, ... get the study's styles
and claims), and its seed is its place in the list. An analysis without a name is named after the condition its
run recorded (so two seeds of one condition from two run directories are one condition with n = 2), else after its
directory; its seed is the one its run recorded. A grid keeps its models' conditions, each prefixed with the name
given for the grid (``cifar/ape``). Two models of one condition and seed are refused, since the report could not
tell them apart.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.results.tables` (reading any result file), :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from peanchor.core.errors import DataError
from peanchor.results.records import AnalysisResult, CellId, ModelResult, Results, SweepRow, TrainSummary
from peanchor.results.tables import default_name, read_result

__all__ = ["Analyses", "as_results", "gather", "gather_items", "input_arg"]

Analyses = Union[
    AnalysisResult, Sequence[AnalysisResult], Mapping[str, "AnalysisResult | Sequence[AnalysisResult]"], Results
]
Input = Union[AnalysisResult, Sequence[AnalysisResult], Results, str, "os.PathLike[str]"]


def _name(result: AnalysisResult, index: int) -> str:
    source = result.source or {}
    return str(source.get("condition") or result.model.pe or "model") + f" #{index + 1}"


def as_results(analyses: Analyses) -> Results:
    """One or several analyses as a :class:`Results` (each name is a condition, each list entry a seed); paths
    to result files are read as :func:`gather` reads them.

    Returns:
        The :class:`Results` grid the report's figures and tables read.
    """
    if not isinstance(analyses, (Results, AnalysisResult, Mapping, Sequence)) or isinstance(analyses, str):
        raise DataError(f"cannot plot a {type(analyses).__name__}: expected AnalysisResult(s), a mapping name → "
                        "result(s), or Results")  # fmt: skip
    return gather(analyses)


def gather(inputs: Mapping[str, Input] | Sequence[Input] | Results | AnalysisResult) -> Results:
    """Analyses, grids and paths to either (see the module's docstring) as one :class:`Results`."""
    if isinstance(inputs, Results):
        return inputs
    if isinstance(inputs, AnalysisResult):
        inputs = [inputs]
    return gather_items(list(inputs.items()) if isinstance(inputs, Mapping) else [(None, v) for v in inputs])


def gather_items(items: Sequence[tuple[str | None, Input]]) -> Results:
    """:func:`gather` of ``(name, input)`` pairs, a name None where it is to be inferred; the models keep the
    inputs' order. One grid without a name is itself, every record of it kept."""
    read = [(name, read_result(v) if isinstance(v, (str, os.PathLike)) else v,
             v if isinstance(v, (str, os.PathLike)) else None) for name, v in items]  # fmt: skip
    if len(read) == 1 and read[0][0] is None and isinstance(read[0][1], Results):
        return read[0][1]
    models: list[ModelResult] = []
    origins: list[str] = []  # where each model came from, for the error that two cannot be told apart
    sweep: list[SweepRow] = []
    grids: list[Results] = []
    shifts: dict[str, Any] | None = None
    for position, (name, value, where) in enumerate(read):
        origin = str(where) if where is not None else f"{name!r}" if name is not None else f"input #{position + 1}"
        if isinstance(value, Results):
            def named(text: str, prefix: str | None = name) -> str:
                return f"{prefix}/{text}" if prefix else text

            grids.append(value)
            shifts = value.shifts if shifts is None else shifts
            models += [dataclasses.replace(m, name=named(m.name), condition=named(m.condition)) for m in value.models]
            origins += [origin] * len(value.models)
            sweep += [dataclasses.replace(p, model=named(p.model), condition=named(p.condition))
                      for p in value.alpha_sweep]  # fmt: skip
            continue
        for index, result in enumerate([value] if isinstance(value, AnalysisResult) else list(value)):
            if not isinstance(result, AnalysisResult):
                raise DataError(f"{name or where or position!r}: expected an AnalysisResult, a results file or a path "
                                f"to one, got a {type(result).__name__}")  # fmt: skip
            condition, seed = _condition(result, name, where, position, index)
            cell = CellId(name=f"{condition}-s{seed}", condition=condition, pe=result.model.pe or "", rpt=False,
                          seed=seed)  # fmt: skip
            models.append(ModelResult.from_analysis(result, cell, TrainSummary(), run_dir=""))
            origins.append(origin)
            sweep += [SweepRow.from_point(p, cell.name, condition, seed) for p in result.alpha_sweep]
            shifts = result.shifts if shifts is None else shifts
    if not models:
        raise DataError("nothing to report: no analyses given")
    seen: dict[tuple[str, int], str] = {}
    for m, origin in zip(models, origins):
        if (m.condition, m.seed) in seen:
            raise DataError(f"two models are both {m.condition!r} seed {m.seed} ({seen[(m.condition, m.seed)]} and "
                            f"{origin}): name them (NAME=PATH on the command line, a mapping name → result in "
                            "Python)")  # fmt: skip
        seen[(m.condition, m.seed)] = origin
    only_grids = len(grids) == len(items)  # what every grid says the same of, and no analysis contradicts
    shared = {f: _shared([getattr(g, f) for g in grids]) if only_grids else None
              for f in ("preset", "dataset", "img_size", "severity_table", "shift_sources")}  # fmt: skip
    if not grids:  # analyses only: the data every one of them was measured on, when they agree
        data = [_data_of(m) for m in models]
        shared["dataset"] = _shared([d.get("name") for d in data])
        shared["img_size"] = _shared([d.get("img_size") for d in data])
    return Results(models=models, alpha_sweep=sweep, conditions=list(dict.fromkeys(m.condition for m in models)),
                   shifts=dict(shifts or {}), seeds=sorted({m.seed for m in models}), **shared)  # fmt: skip


def _condition(result: AnalysisResult, name: str | None, where: Any, position: int, index: int) -> tuple[str, int]:
    """An analysis's condition and seed in the report (the module's docstring says how they are chosen)."""
    if name is not None:
        return str(name), index
    if where is None:  # an analysis in memory: a condition of its own, as its PE and place name it
        return _name(result, position), index
    source = result.source or {}  # a path: the condition and seed its run recorded, else its directory's name
    seed = source.get("seed")
    return str(source.get("condition") or default_name(where, position)), seed if isinstance(seed, int) else index


def _data_of(m: ModelResult) -> dict[str, Any]:
    """The data spec an analysis recorded (``peanchor.analyze`` on a named dataset nests it under ``data``)."""
    data = dict((m.source or {}).get("data") or {})
    return {**data["data"], **data} if isinstance(data.get("data"), dict) else data


def _shared(values: list[Any]) -> Any:
    """The value every grid has (its preset, dataset, resolution), or None."""
    return values[0] if values and all(v == values[0] for v in values) else None


def input_arg(text: str) -> tuple[str | None, Path]:
    """A command-line input: ``NAME=PATH`` or ``PATH`` (a path that exists is never split at its ``=``)."""
    name, sep, path = text.partition("=")
    if sep and name and not Path(text).exists():
        return name, Path(path)
    return None, Path(text)
