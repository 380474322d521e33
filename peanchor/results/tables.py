"""Results as tables: an analysis or a grid's models as long-format pandas rows, one summary row per model, and
:func:`compare` across models.

::

    result.to_pandas()                      # AnalysisResult: the rows of analysis.csv, numeric columns as floats
    results.to_pandas()                     # Results: the same rows for every model, with its name, condition, seed
    peanchor.compare({"mine": result, "paper-ape": "runs/ape/analysis", "grid": "out/results.json"})

The long rows are :func:`~peanchor.results.frames.measure_rows` (``analysis.csv``'s; the rows, frames and summaries
of one record live in :mod:`peanchor.results.frames`, and are re-exported here); a column that does not apply to a row (a layer for an
accuracy, a shift for SSDC) is NaN, never ``""``. The summary row of a model is what the report's tables show of it:
accuracies, ΔSSDC, every shift's accuracy and Fragility Score, and each lens's one number (its highest value over
layers or its mean, :attr:`~peanchor.lenses.Lens.stat`), in order and under RPI. pandas is optional
(``pip install 'peanchor[pandas]'``); without it these are one :class:`~peanchor.core.errors.ConfigError` line, and
:func:`summary_row` and :func:`read_result` need nothing.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.results.frames`, :mod:`peanchor.core.errors`; pandas lazily.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from peanchor.core.errors import DataError, SchemaError
from peanchor.results.records import (
    ANALYSIS_JSON,
    ANALYSIS_SCHEMA,
    RESULTS_JSON,
    RESULTS_SCHEMA,
    AnalysisResult,
    Measures,
    ModelResult,
    Results,
    read_analysis,
    read_results,
)


from peanchor.results.frames import _pandas, MODEL_COLUMNS, NUMERIC_COLUMNS, analysis_frame, data_text, interventions_text, lens_number, measure_rows, results_frame, summary_html, summary_repr, summary_row

__all__ = ['compare', 'default_name', 'read_result', 'MODEL_COLUMNS', 'NUMERIC_COLUMNS', 'analysis_frame', 'data_text', 'interventions_text', 'lens_number', 'measure_rows', 'results_frame', 'summary_html', 'summary_repr', 'summary_row']  # fmt: skip


Source = Union[AnalysisResult, ModelResult, Results, str, "os.PathLike[str]"]


def read_result(path: str | os.PathLike[str]) -> AnalysisResult | Results:
    """Whatever result file ``path`` is: an ``analysis.json`` or a ``results.json``, or a directory holding one
    (a run directory's analysis is ``RUN/analysis/analysis.json``). One line when it is none of them."""
    p = Path(path)
    candidates = [p] if p.is_file() else [p / RESULTS_JSON, p / ANALYSIS_JSON, p / "analysis" / ANALYSIS_JSON]
    for candidate in candidates:
        if candidate.is_file():
            return _read_file(candidate)
    if not p.exists():
        raise DataError(f"{p}: no such file or directory")
    raise DataError(f"{p}: no analysis.json or results.json here (expected an analysis directory, a run directory "
                    "analysed by `peanchor analyze`, a reproduce directory or one of those files)")  # fmt: skip


def _read_file(path: Path) -> AnalysisResult | Results:
    import json

    try:
        schema = json.loads(path.read_text(encoding="utf-8")).get("schema")
    except (ValueError, AttributeError, OSError):
        schema = None  # the readers below say what is wrong with it
    if schema == ANALYSIS_SCHEMA or (schema != RESULTS_SCHEMA and path.name == ANALYSIS_JSON):
        return read_analysis(path)
    return read_results(path)


def _named(source: Any, name: str) -> list[tuple[str, Measures]]:
    if isinstance(source, (str, os.PathLike)):
        source = read_result(source)
    if isinstance(source, Measures):
        return [(name, source)]
    if isinstance(source, Results):
        return [(f"{name}/{m.name}", m) for m in source.models]
    raise SchemaError(f"{name!r}: expected an AnalysisResult, Results or a path to one, got a {type(source).__name__}")


def compare(sources: Mapping[str, Source] | Sequence[Source]) -> Any:  # pandas.DataFrame
    """One table across models: a row per model (indexed by its name) with :func:`summary_row`'s columns, NaN
    where a model lacks one (a shift it was not measured under, a lens it could not be read with).

    ``sources`` maps a name to an analysis (``AnalysisResult``, a path to ``analysis.json`` or its directory, or
    a run directory), or to a grid (``Results`` or a path to ``results.json``: one row per model, named
    ``name/model``); a list takes its names from the paths, or ``model #i``.

    Returns:
        A ``pandas.DataFrame`` of float64: one row per model, indexed by ``model``.
    """
    pd = _pandas()
    if not isinstance(sources, Mapping):
        sources = {default_name(s, i): s for i, s in enumerate(sources)}
    rows = [(n, summary_row(m)) for name, source in sources.items() for n, m in _named(source, str(name))]
    if not rows:
        raise DataError("nothing to compare: no models given")
    frame = pd.DataFrame.from_records([r for _, r in rows], index=pd.Index([n for n, _ in rows], name="model"))
    return frame.astype("float64")


def default_name(source: Any, index: int) -> str:
    """The name of a model given by its path: its run directory's for ``RUN/analysis``, else its directory's."""
    if isinstance(source, (str, os.PathLike)):
        p = Path(source)
        p = p.parent if p.suffix == ".json" else p
        return p.parent.name if p.name == "analysis" and p.parent.name else p.name
    return f"model #{index + 1}"
