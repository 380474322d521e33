"""Results as tables: an analysis or a grid's models as long-format pandas rows, one summary row per model, and
:func:`compare` across models.

::

    result.to_pandas()                      # AnalysisResult: the rows of analysis.csv, numeric columns as floats
    results.to_pandas()                     # Results: the same rows for every model, with its name, condition, seed
    peanchor.compare({"mine": result, "paper-ape": "runs/ape/analysis", "grid": "out/results.json"})

The long rows are :func:`measure_rows` (``analysis.csv``'s); a column that does not apply to a row (a layer for an
accuracy, a shift for SSDC) is NaN, never ``""``. The summary row of a model is what the report's tables show of it:
accuracies, ΔSSDC, every shift's accuracy and Fragility Score, and each lens's one number (its highest value over
layers or its mean, :attr:`~peanchor.lenses.Lens.stat`), in order and under RPI. pandas is optional
(``pip install 'peanchor[pandas]'``); without it these are one :class:`~peanchor.errors.ConfigError` line, and
:func:`summary_row` and :func:`read_result` need nothing.

Imports: :mod:`peanchor.results`, :mod:`peanchor.dose_results` (the sweeps' rows), :mod:`peanchor.lenses`,
:mod:`peanchor.errors`; pandas lazily.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Union

from peanchor.dose_results import DOSE_COLUMNS, dose_rows
from peanchor.errors import ConfigError, DataError, SchemaError
from peanchor.lenses import LENSES, Lens
from peanchor.results import (
    ANALYSIS_JSON,
    ANALYSIS_SCHEMA,
    RESULTS_JSON,
    RESULTS_SCHEMA,
    AnalysisResult,
    Measures,
    ModelResult,
    Results,
    SweepPoint,
    read_analysis,
    read_results,
)

__all__ = ["NUMERIC_COLUMNS", "analysis_frame", "compare", "default_name", "lens_number", "measure_rows",
           "read_result", "results_frame", "summary_html", "summary_repr", "summary_row"]  # fmt: skip

NUMERIC_COLUMNS = ("layer", "head", "alpha", "severity", "value")
MODEL_COLUMNS = ("model", "condition", "seed", "pe", "rpt")  # what results_frame puts before each row

Source = Union[AnalysisResult, ModelResult, Results, str, "os.PathLike[str]"]


def _pandas() -> Any:
    try:
        import pandas
    except ModuleNotFoundError:
        raise ConfigError("tables need pandas: pip install 'peanchor[pandas]'") from None
    return pandas


def _frame(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> Any:  # pandas.DataFrame
    pd = _pandas()
    frame = pd.DataFrame.from_records(list(rows), columns=list(columns))
    for column in NUMERIC_COLUMNS:  # None (not applicable) → NaN; every value a float
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype("float64")
    return frame


def _given(value: Any) -> Any:
    return None if value == "" else value  # a lens row's "" (no layer, no head) is a missing value


def measure_rows(measures: Measures, sweep: Iterable[SweepPoint] = ()) -> Iterator[dict[str, Any]]:
    """The long rows of any model's measures (an analysis, or a model of ``results.json`` with its α-sweep points):
    those of ``analysis.csv`` (:func:`peanchor.results.analysis_rows`), a column that does not apply None."""

    def row(metric: str, value: Any, layer: Any = None, alpha: Any = 1.0, shift: str | None = None,
            severity: Any = None, head: Any = None) -> dict:  # fmt: skip
        return {"metric": metric, "layer": layer, "head": head, "alpha": alpha, "shift": shift, "severity": severity,
                "value": value}  # fmt: skip

    def with_ci(metric: str, value: Any, bounds: Sequence[Any] | None, **where: Any) -> Iterator[dict[str, Any]]:
        yield row(metric, value, **where)  # then its interval's bounds, where it has one: <metric>_ci_low, _ci_high
        for bound, v in zip(("low", "high"), bounds or ()):
            yield row(f"{metric}_ci_{bound}", v, **where)

    yield from with_ci("clean_acc", measures.clean_acc, measures.clean_acc_ci)
    yield from with_ci("rpi_acc", measures.rpi_acc, measures.rpi_acc_ci)
    if measures.chance is not None:
        yield row("chance", measures.chance)
    for name, lens in LENSES.items():
        record = measures.lens(name)
        for r in lens.rows(record) if record is not None else ():
            yield row(r.metric, r.value, layer=_given(r.layer), head=_given(r.head))
    yield from with_ci("delta_ssdc", measures.delta_ssdc, measures.delta_ssdc_ci)
    for name, v in measures.acc.items():
        yield from with_ci("acc", v, (measures.acc_ci or {}).get(name), shift=name)
        yield from with_ci("fragility", measures.fragility[name], (measures.fragility_ci or {}).get(name), shift=name)
    for kind, accs in (measures.severities or {}).items():
        for i, a in enumerate(accs):
            yield row("acc", a, shift=kind, severity=i + 1)
            yield row("fragility", (measures.severity_fragility or {})[kind][i], shift=kind, severity=i + 1)
    for e in sweep:
        yield from with_ci("sweep_delta_ssdc", e.delta_ssdc, e.delta_ssdc_ci, alpha=e.alpha)
        yield from with_ci("sweep_clean_acc", e.clean_acc, e.clean_acc_ci, alpha=e.alpha)
        for name, v in e.acc.items():
            yield row("sweep_acc", v, alpha=e.alpha, shift=name)
            yield from with_ci("sweep_fragility", e.fragility[name], (e.fragility_ci or {}).get(name), alpha=e.alpha,
                               shift=name)  # fmt: skip
    for key, trend in (getattr(measures, "alpha_trends", None) or {}).items():  # an analysis's slopes along α
        yield from with_ci(f"alpha_trend_{key}", trend.slope, trend.ci, alpha=None)  # (results.json has none)
    yield from dose_rows(measures.dose_sweeps or ())  # with two more columns: sweep, dose


def analysis_frame(result: AnalysisResult) -> Any:
    """The long rows of one analysis (``analysis.csv``'s) as a DataFrame: ``metric``, ``layer``, ``head``,
    ``alpha``, ``shift``, ``severity``, ``value``; the numeric ones float64, NaN where a column does not apply."""
    from peanchor.results import CSV_COLUMNS

    doses = DOSE_COLUMNS if result.dose_sweeps else ()  # an analysis with dose-response sweeps: sweep, dose
    frame = _frame(measure_rows(result, result.alpha_sweep), (*CSV_COLUMNS, *doses))
    # why an FS is NaN (text has no place in the numeric rows): shift → reason, at α = 1
    frame.attrs["fragility_undefined"] = dict(result.fragility_undefined or {})
    return frame


def results_frame(results: Results) -> Any:
    """The long rows of every model of ``results``, each led by its ``model``, ``condition``, ``seed``, ``pe``
    and ``rpt`` (its α-sweep points are its own rows, ``metric`` ``sweep_*``)."""
    from peanchor.results import CSV_COLUMNS

    sweeps: dict[str, list[Any]] = {}
    for point in results.alpha_sweep:
        sweeps.setdefault(point.model, []).append(point)
    rows = ({"model": m.name, "condition": m.condition, "seed": m.seed, "pe": m.pe, "rpt": m.rpt, **row}
            for m in results.models for row in measure_rows(m, sweeps.get(m.name, ())))  # fmt: skip
    doses = DOSE_COLUMNS if any(m.dose_sweeps for m in results.models) else ()
    frame = _frame(rows, (*MODEL_COLUMNS, *CSV_COLUMNS, *doses))
    frame["seed"] = frame["seed"].astype("int64")
    frame["rpt"] = frame["rpt"].astype("bool")
    return frame


def lens_number(lens: type[Lens], record: Any, mode: str) -> float:
    """A lens's one number for a model: the highest finite value of its per-layer curve (``stat`` "max") or their
    mean; NaN without a record or a finite value."""
    values = [v for v in lens.layers(record, mode) if _finite(v)] if record is not None else []
    if not values:
        return math.nan
    return max(values) if lens.stat == "max" else sum(values) / len(values)


def summary_row(measures: Measures) -> dict[str, float]:
    """One model as flat numbers: ``clean_acc``, ``rpi_acc``, ``delta_ssdc``, ``acc_<shift>`` and ``fs_<shift>``
    for each shift, and ``<lens>_<stat>`` and ``<lens>_<stat>_rpi`` for each lens measured; after each number that
    has an interval, its bounds ``<key>_ci_low`` and ``<key>_ci_high`` (an FS at chance is NaN, its bounds too)."""
    row: dict[str, float] = {}

    def put(key: str, value: Any, bounds: Sequence[Any] | None = None) -> None:
        row[key] = float(value)
        if bounds:
            row[f"{key}_ci_low"], row[f"{key}_ci_high"] = float(bounds[0]), float(bounds[1])

    put("clean_acc", measures.clean_acc, measures.clean_acc_ci)
    put("rpi_acc", measures.rpi_acc, measures.rpi_acc_ci)
    put("delta_ssdc", measures.delta_ssdc, measures.delta_ssdc_ci)
    for shift, acc in measures.acc.items():
        put(f"acc_{shift}", acc, (measures.acc_ci or {}).get(shift))
        put(f"fs_{shift}", measures.fragility[shift], (measures.fragility_ci or {}).get(shift)
            or ([math.nan, math.nan] if measures.acc_ci and shift in (measures.fragility_undefined or {}) else None))
    for name, lens in LENSES.items():
        record = measures.lens(name)
        if record is not None:
            row[f"{name}_{lens.stat}"] = lens_number(lens, record, "normal")
            row[f"{name}_{lens.stat}_rpi"] = lens_number(lens, record, "rpi")
    return row


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


def _finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


# ---- what a notebook shows of one analysis ---------------------------------------------------------
def _value(v: float) -> str:
    return f"{v:.3f}" if _finite(v) else "n/a"


def data_text(result: AnalysisResult) -> str:
    """What the analysis was measured on: ``scenes, 500 images, 64 px`` (the name, or "tensors" for images given in
    Python)."""
    data = dict((result.source or {}).get("data") or {})
    if isinstance(data.get("data"), dict):  # peanchor.analyze on a named dataset: the spec under "data"
        data = {**data.pop("data"), **data}
    name = data.get("name") or data.get("kind") or "unknown data"
    size = data.get("img_size")
    return f"{name}, {result.num_images} images" + (f", {size} px" if size else "")


def interventions_text(result: AnalysisResult) -> str:
    """The edits every pass ran under (``--intervention``), or ``none``."""
    edits = list(getattr(result.settings, "interventions", None) or ())
    return " + ".join(str(e) for e in edits) if edits else "none"


def _heading(result: AnalysisResult) -> str:
    m = result.model
    grid = "x".join(str(g) for g in m.grid)
    return (f"pe={m.pe or 'none'}, {m.depth} layers, {grid} grid; data {data_text(result)}; interventions "
            f"{interventions_text(result)}")


def _shown(row: Mapping[str, float]) -> dict[str, str]:
    """:func:`summary_row`'s numbers as shown: each with its interval folded in (``0.512 [0.410, 0.603]``)."""
    shown = {}
    for key, v in row.items():
        if key.endswith(("_ci_low", "_ci_high")):
            continue
        low, high = row.get(f"{key}_ci_low"), row.get(f"{key}_ci_high")
        shown[key] = _value(v) + (f" [{_value(low)}, {_value(high)}]" if low is not None and high is not None
                                  and _finite(v) else "")  # fmt: skip
    return shown


def summary_repr(result: AnalysisResult) -> str:
    """A few lines: the model, and :func:`summary_row`'s numbers with their intervals (``repr`` of an analysis); an
    FS that is undefined says why."""
    numbers = ", ".join(f"{k}={v}" for k, v in _shown(summary_row(result)).items())
    lines = [f"AnalysisResult({_heading(result)}; {numbers})"]
    reason = (result.source or {}).get("accuracy")
    if reason:
        lines.append(f"  accuracy: {reason}")
    lines += [f"  FS {shift} undefined: {why}" for shift, why in (result.fragility_undefined or {}).items()]
    return "\n".join(lines)


def summary_html(result: AnalysisResult) -> str:
    """The summary table of an analysis as HTML (a notebook's view of it): :func:`summary_row`, one number a row."""
    from html import escape

    row = _shown(summary_row(result))
    labels = {"clean_acc": "top-1, clean", "rpi_acc": "top-1 under RPI", "delta_ssdc": "ΔSSDC (under RPI)"}
    for s in result.acc:
        labels |= {f"acc_{s}": f"top-1 under {s}", f"fs_{s}": f"Fragility Score, {s}"}
    for name, lens in LENSES.items():
        labels |= {f"{name}_{lens.stat}": lens.stat_label, f"{name}_{lens.stat}_rpi": f"{lens.stat_label} under RPI"}
    cells = "".join(f"<tr><th>{escape(labels.get(k, k))}</th><td><code>{escape(k)}</code></td><td>{escape(v)}</td></tr>"
                    for k, v in row.items())  # fmt: skip
    note = (result.source or {}).get("accuracy")
    caption = escape(_heading(result)) + (f"<br/>accuracy: {escape(str(note))}" if note else "")
    caption += "".join(f"<br/>FS {escape(k)} undefined: {escape(str(why))}"
                       for k, why in (result.fragility_undefined or {}).items())  # fmt: skip
    return f"<table><caption>AnalysisResult: {caption}</caption><tbody>{cells}</tbody></table>"
