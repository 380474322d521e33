"""The result files' schema: typed records for ``analysis.json`` (one model's analysis, with its tidy
``analysis.csv``) and ``results.json`` (a grid's models and α-sweep points), and the only code that writes and
reads them.

::

    AnalysisResult(Measures)   analysis.json: what evaluate_model measured, how, and on what
    ModelResult(Measures)      one model of results.json: the cell it is, its training, its Measures
    SweepRow(SweepPoint)       one α-sweep point of results.json
    Results                    results.json

Every file carries ``schema`` (``peanchor.analysis`` / ``peanchor.results``) and ``schema_version``
(:data:`SCHEMA_VERSION`); reading a file of another version, or another tool's, is one :class:`SchemaError` line.
What is read is validated by pydantic against these dataclasses (strict JSON types), so a damaged file names the
first key at fault; an undefined number (NaN, ±inf: FS at 0 clean accuracy) is ``null`` and reads back as NaN.
``fragility`` is exactly ``1 - acc / clean_acc`` and ``delta_ssdc`` exactly ``ssdc.rpi[1] - ssdc.rpi[0]``.

A model's measures per layer are its lenses' records (:mod:`peanchor.lenses`: SSDC, the position probe, the
attention distance, ...): :attr:`Measures.lenses` holds them by lens name, and the files hold each at the top level
under that name, validated against the lens's ``record_type`` when read (a lens with ``required`` set must be
there). A new lens therefore needs nothing here. Any other new measure of a model is one field: of
:class:`Measures` (per model, at α = 1) or :class:`SweepPoint` (per α). It then travels from analysis.json into every
model (or sweep row) of results.json by itself; the CSV's rows are listed in :func:`analysis_rows`.

Imports: :mod:`peanchor.fileio`, :mod:`peanchor.errors`, :mod:`peanchor.lenses` (the records),
:mod:`peanchor.dose_results` (``dose_sweeps``); pydantic lazily (to read), :mod:`peanchor.tables` lazily
(``to_pandas``, the summary a notebook shows).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from peanchor import fileio
from peanchor.errors import DataError, SchemaError
from peanchor.fileio import Number  # a measured float: null in a file reads as NaN
from peanchor.dose_results import DOSE_COLUMNS, LENS_MAP, DoseSweep
from peanchor.lenses import LENSES, HeadLayers, LayerPair, LensFailure, UnknownLensRecord
from peanchor.lenses.attention_distance import AttentionDistanceLayers
from peanchor.lenses.position_probe import PositionProbeLayers
from peanchor.lenses.ssdc import SSDCLayers

__all__ = ["ANALYSIS_CSV", "ANALYSIS_JSON", "RESULTS_JSON", "SCHEMA_VERSION", "AnalysisResult", "AnalysisSettings",
           "AttentionDistanceLayers", "FailedCell", "HeadLayers", "LayerPair", "Measures", "ModelInfo", "ModelResult",
           "PositionProbeLayers", "Results", "SSDCLayers", "SweepPoint", "SweepRow", "TrainSummary", "analysis_rows",
           "read_analysis", "read_results", "results_from_dict", "to_json_dict", "write_analysis", "write_results"]  # fmt: skip

SCHEMA_VERSION = 2  # 2: attention distance and the position probe; the CSV's head column
ANALYSIS_SCHEMA = "peanchor.analysis"
RESULTS_SCHEMA = "peanchor.results"
ANALYSIS_JSON = "analysis.json"
ANALYSIS_CSV = "analysis.csv"
RESULTS_JSON = "results.json"

_REWRITE = {ANALYSIS_SCHEMA: "rerun `peanchor analyze` (or `peanchor reproduce`, which analyses such cells again)",
            RESULTS_SCHEMA: "rerun `peanchor report OUT` (or `peanchor reproduce`)"}  # how to make the file again
_OMIT = {"omit_if_none": True}  # an optional part that was not measured is absent from the file, not null
_LENS_RECORDS = {"lens_records": True}  # a mapping whose items are written as keys of the object that holds it


def _optional() -> Any:
    return field(default=None, metadata=_OMIT)


# ----------------------------------------------------------------------------------------------
# What one model is measured as


@dataclass(kw_only=True)
class Measures:
    """What a model is measured as at α = 1; shared by analysis.json and each model of results.json."""

    clean_acc: Number
    rpi_acc: Number  # top-1 under RPI, mean over draws
    # lens name → its record (peanchor.lenses); in the files each record sits at the top level under its lens's name
    lenses: dict[str, Any] = field(default_factory=dict, metadata=_LENS_RECORDS)
    delta_ssdc: Number  # ssdc.rpi[1] - ssdc.rpi[0]
    acc: dict[str, Number]  # shift name → top-1
    fragility: dict[str, Number]  # shift name → 1 - acc / clean_acc
    severities: dict[str, list[Number]] | None = _optional()  # kind → top-1 at severity 1..5
    severity_fragility: dict[str, list[Number]] | None = _optional()
    dose_sweeps: list[DoseSweep] | None = _optional()  # the --sweep dose-responses (peanchor.dose_results)

    def lens(self, name: str) -> Any:
        """The record of lens ``name``, or None where it was not measured (e.g. no attention weights), failed
        (:attr:`lens_failures`) or was measured by a lens not installed here (:attr:`unknown_lenses`)."""
        record = self.lenses.get(name)
        return None if isinstance(record, (LensFailure, UnknownLensRecord)) else record

    @property
    def lens_failures(self) -> dict[str, str]:
        """Lens name → its error, for every lens that failed in this model's analysis."""
        return {name: r.error for name, r in self.lenses.items() if isinstance(r, LensFailure)}

    @property
    def unknown_lenses(self) -> list[str]:
        """The lenses whose records were read from a file but that are not installed here (kept as they were)."""
        return [name for name, r in self.lenses.items() if isinstance(r, UnknownLensRecord)]

    @property
    def ssdc(self) -> SSDCLayers:
        return self.lenses["ssdc"]

    @property
    def attention_distance(self) -> AttentionDistanceLayers | None:
        return self.lenses.get("attention_distance")

    @property
    def position_probe(self) -> PositionProbeLayers | None:
        return self.lenses.get("position_probe")


@dataclass(kw_only=True)
class SweepPoint:
    """The PE scaled by α at inference: ΔSSDC under RPI, accuracies and FS with RPI off, all at that α."""

    alpha: Number
    delta_ssdc: Number
    ssdc_rpi: list[Number]  # SSDC under RPI of layers 0 and 1
    clean_acc: Number
    acc: dict[str, Number]
    fragility: dict[str, Number]


@dataclass(kw_only=True)
class ModelInfo:
    pe: str | None
    depth: int
    grid: list[int]
    scalable: bool  # whether α means anything for its PE


@dataclass(kw_only=True)
class AnalysisSettings:
    """How an analysis was made: its :class:`~peanchor.analysis.plan.AnalysisPlan`'s settings, shifts aside."""

    alphas: list[float]
    rpi_draws: int
    seed: int
    ssdc_mode: str
    metric: str
    bootstrap: int
    severities: bool
    batch_size: int
    evalset: str  # the fingerprint of the evaluation images
    device: str
    probe_ridge: float  # the position probe's λ relative to the mean feature variance
    probe_holdout: float  # the fraction of the images the probe is scored on (drawn with ``seed``)
    max_images: int | None = _optional()  # the evaluation subset's size (None: every image)
    lenses: list[str] | None = _optional()  # the lenses measured (absent in files written before: the three of then)
    interventions: list[str] | None = _optional()  # the edits every pass ran under (absent in files before: none)
    lens_options: dict[str, dict[str, Any]] | None = _optional()  # lens → option → value: a lens's own options
    sweeps: list[str] | None = _optional()  # the dose-response sweeps measured (absent in files before: none)


@dataclass(kw_only=True)
class AnalysisResult(Measures):
    """One model's analysis: ``analysis.json``."""

    shifts: dict[str, dict[str, Any]]  # shift name → its description (kind and parameters)
    alpha_sweep: list[SweepPoint]  # empty for a PE that α does not scale
    num_images: int
    forward_passes: int
    passes: dict[str, int]  # {"full", "truncated", "truncated_layers"}
    seconds: Number
    timing: dict[str, Number]
    model: ModelInfo
    settings: AnalysisSettings
    severity_shifts: dict[str, list[dict[str, Any]]] | None = _optional()
    severity_table: str | None = _optional()
    shift_sources: dict[str, str] | None = _optional()  # shift name → "preset cpu", "--shift jpeg:quality=10", ...
    source: dict[str, Any] = field(default_factory=dict)  # where the model and the data came from
    notes: list[str] | None = _optional()  # what the analysis log said of the measurement (a lens's fallback, ...)

    def save(self, out_dir: str | os.PathLike[str]) -> Path:
        """Write ``analysis.json`` and ``analysis.csv`` into ``out_dir`` (:func:`write_analysis`); returns the JSON."""
        return write_analysis(self, out_dir)

    def to_pandas(self) -> Any:
        """The rows of ``analysis.csv`` as a pandas DataFrame, numeric columns float64 (:mod:`peanchor.tables`)."""
        from peanchor.tables import analysis_frame

        return analysis_frame(self)

    def __repr__(self) -> str:
        from peanchor.tables import summary_repr

        return summary_repr(self)

    def _repr_html_(self) -> str:  # a notebook shows the summary table
        from peanchor.tables import summary_html

        return summary_html(self)


# ----------------------------------------------------------------------------------------------
# A study's results


@dataclass(kw_only=True)
class CellId:
    name: str  # <condition>-s<seed>
    condition: str
    pe: str
    rpt: bool
    seed: int


@dataclass(kw_only=True)
class TrainSummary:
    val_acc: float | None = None
    seconds: float | None = None
    epochs: int | None = None


@dataclass(kw_only=True)
class ModelResult(Measures, CellId):
    """One trained and analysed model of a grid (fields: :class:`CellId`, then :class:`Measures`, then these)."""

    train: TrainSummary = field(default_factory=TrainSummary)
    run_dir: str | None = None
    analysis_seconds: float | None = None
    forward_passes: int | None = None

    @classmethod
    def from_analysis(cls, analysis: AnalysisResult, cell: CellId, train: TrainSummary, run_dir: str) -> ModelResult:
        measures = {f.name: getattr(analysis, f.name) for f in dataclasses.fields(Measures)}
        return cls(**dataclasses.asdict(cell), **measures, train=train, run_dir=run_dir,
                   analysis_seconds=analysis.seconds, forward_passes=analysis.forward_passes)  # fmt: skip


@dataclass(kw_only=True)
class SweepId:
    model: str
    condition: str
    seed: int


@dataclass(kw_only=True)
class SweepRow(SweepPoint, SweepId):
    """One α-sweep point of one model of a grid."""

    @classmethod
    def from_point(cls, point: SweepPoint, model: str, condition: str, seed: int) -> SweepRow:
        return cls(model=model, condition=condition, seed=seed, **dataclasses.asdict(point))


@dataclass(kw_only=True)
class FailedCell:
    name: str
    condition: str | None = None
    seed: int | None = None
    stage: str | None = None  # config, train or analyze
    error: str | None = None


@dataclass(kw_only=True)
class Results:
    """``results.json``: every analysed model and α-sweep point of a grid, and what failed or is missing."""

    preset: str | None = None
    dataset: str | None = None
    img_size: int | None = None
    shifts: dict[str, dict[str, Any]] = field(default_factory=dict)
    conditions: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    models: list[ModelResult]
    alpha_sweep: list[SweepRow] = field(default_factory=list)
    failed: list[FailedCell] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # cells never attempted or not analysed yet
    wall_seconds: float | None = None
    compute_seconds: float = 0.0
    versions: dict[str, str] = field(default_factory=dict)
    severity_table: str | None = _optional()
    shift_sources: dict[str, str] | None = _optional()  # shift name → where it came from (preset, --shift, rule)
    analysis: dict[str, Any] | None = _optional()  # the grid's analysis plan

    def to_pandas(self) -> Any:
        """Every model's ``analysis.csv`` rows, led by its name, condition, seed, PE and RPT (:mod:`peanchor.tables`)."""
        from peanchor.tables import results_frame

        return results_frame(self)


# ----------------------------------------------------------------------------------------------
# JSON


def to_json_dict(record: Any) -> Any:
    """A record as plain JSON data: dataclasses become objects (unmeasured optional parts left out)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        out = {}
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            if f.metadata.get("lens_records"):  # each lens's record under the lens's name
                out.update({name: _lens_record_json(r) for name, r in value.items()})
            elif f.metadata.get(LENS_MAP):  # a dose's lens records (peanchor.dose_results), under the field's name
                out[f.name] = {name: _lens_record_json(r) for name, r in value.items()}
            elif not (value is None and f.metadata.get("omit_if_none")):
                out[f.name] = to_json_dict(value)
        return out
    if isinstance(record, (list, tuple)):
        return [to_json_dict(v) for v in record]
    if isinstance(record, dict):
        return {str(k): to_json_dict(v) for k, v in record.items()}
    return record


def _lens_record_json(record: Any) -> Any:
    if isinstance(record, LensFailure):
        return str(record)  # "failed: <error>"
    if isinstance(record, UnknownLensRecord):
        return record.data  # as it was read
    return to_json_dict(record)


def _document(record: Any, schema: str) -> dict[str, Any]:
    return {"schema": schema, "schema_version": SCHEMA_VERSION, **to_json_dict(record)}


R = TypeVar("R")


@functools.cache
def _adapter(cls: type) -> Any:  # pydantic.TypeAdapter, built on first read
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def _where(loc: tuple[Any, ...]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def _from_document(doc: Any, cls: type[R], schema: str, source: str) -> R:
    """Check the schema fields, then validate the rest of ``doc`` into ``cls``; one line for the first fault."""
    if not isinstance(doc, dict):
        raise SchemaError(f"{source}: expected a JSON object at the top level, got {type(doc).__name__}")
    if doc.get("schema") != schema or "schema_version" not in doc:
        found = f"schema {doc['schema']!r}" if "schema" in doc else "no schema field"
        raise SchemaError(f"{source}: not a {schema} file ({found}); it was written by another tool or by a peanchor "
                          f"older than the versioned result files: {_REWRITE[schema]} to rewrite it")  # fmt: skip
    if doc["schema_version"] != SCHEMA_VERSION:
        raise SchemaError(f"{source}: {schema} schema_version {doc['schema_version']!r}, but this peanchor reads "
                          f"version {SCHEMA_VERSION}: {_REWRITE[schema]} with this peanchor, or use the peanchor that "
                          "wrote it")  # fmt: skip
    body = {k: v for k, v in doc.items() if k not in ("schema", "schema_version")}
    if cls is AnalysisResult:
        body, records = _split_lenses(body, (), source, _field_names(AnalysisResult))
        result = _validate(cls, body, source)
        result.lenses = records  # type: ignore[attr-defined]
        return result
    models = body.get("models")
    split = [_split_lenses(m, ("models", i), source, _field_names(ModelResult)) if isinstance(m, dict) else (m, {}) for i, m in
             enumerate(models if isinstance(models, list) else [])]  # fmt: skip
    if split:
        body = {**body, "models": [m for m, _ in split]}
    out = _validate(cls, body, source)
    for model, (_, records) in zip(getattr(out, "models", []), split):
        model.lenses = records
    return out


def _validate(cls: type[R], data: Any, source: str, at: tuple[Any, ...] = ()) -> R:
    """``data`` validated into ``cls`` (strict JSON types); the first fault is one :class:`SchemaError` line, its
    place prefixed with ``at``."""
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_json(json.dumps(data), strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        loc = (*at, *first["loc"])
        if first["type"] == "missing":
            parent = _where(loc[:-1]) or "the top level"
            raise SchemaError(f"{source}: {parent} is missing required key '{loc[-1]}'") from None
        raise SchemaError(f"{source}: {_where(loc)}: {first['msg']} (got {first.get('input')!r})") from None


def _split_lenses(doc: dict[str, Any], at: tuple[Any, ...], source: str,
                  fields: frozenset[str]) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """A model's measures as written (at ``at``): the object without its lenses' records, and those records, each
    validated against its lens's ``record_type`` (or a :class:`LensFailure`). A required lens (SSDC) must be there.
    A key that is neither one of ``fields`` (the record type's own) nor a registered lens is the record of a lens
    not installed here: it is kept as it is (:class:`UnknownLensRecord`), with one warning."""
    missing = [name for name, lens in LENSES.items() if lens.required and doc.get(name) is None]
    if missing:
        raise SchemaError(f"{source}: {_where(at) or 'the top level'} is missing required key '{missing[0]}'")
    records: dict[str, Any] = {}
    for name, lens in LENSES.items():
        value = doc.get(name)
        if value is None:
            continue
        failure = None if lens.required else LensFailure.parse(value)
        records[name] = failure or _validate(lens.record_type, value, source, (*at, name))
    if unknown := [k for k in doc if k not in fields and k not in LENSES]:
        records.update((k, UnknownLensRecord(doc[k])) for k in unknown)
        warnings.warn(f"{source}: {_where(at) or 'the file'} holds the record of {', '.join(map(repr, unknown))}, "
                      "a lens not installed here: kept as it is, not measured or reported", stacklevel=4)  # fmt: skip
    return {k: v for k, v in doc.items() if k in fields}, records


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


def _read_document(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {path}: {getattr(e, 'strerror', None) or e}") from e
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise SchemaError(f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None


# ----------------------------------------------------------------------------------------------
# analysis.json and analysis.csv

CSV_COLUMNS: tuple[str, ...] = ("metric", "layer", "head", "alpha", "shift", "severity", "value")


def analysis_rows(result: AnalysisResult) -> Iterator[dict[str, Any]]:
    """One row per (metric, layer / α / shift / severity) of an analysis: ``analysis.csv``'s long format; a column
    that does not apply is None (:func:`peanchor.tables.measure_rows`)."""
    from peanchor.tables import measure_rows

    return measure_rows(result, result.alpha_sweep)


def _csv_text(rows: Iterator[Mapping[str, Any]], sweeps: bool = False) -> str:
    buf = io.StringIO()  # an analysis with dose-response sweeps has two more columns (sweep, dose)
    writer = csv.DictWriter(buf, fieldnames=[*CSV_COLUMNS, *(DOSE_COLUMNS if sweeps else ())], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return buf.getvalue()


def _analysis_path(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    return p / ANALYSIS_JSON if p.is_dir() or not p.suffix else p


def write_analysis(result: AnalysisResult, out_dir: str | os.PathLike[str]) -> Path:
    """Write ``analysis.csv`` and then ``analysis.json`` into ``out_dir``, atomically: the JSON is written last,
    so its presence means both are complete. Returns the JSON path."""
    out = Path(out_dir)
    fileio.write_text(out / ANALYSIS_CSV, _csv_text(analysis_rows(result), bool(result.dose_sweeps)))
    fileio.write_json(out / ANALYSIS_JSON, _document(result, ANALYSIS_SCHEMA))
    return out / ANALYSIS_JSON


def read_analysis(path: str | os.PathLike[str]) -> AnalysisResult:
    """The analysis at ``path`` (``analysis.json`` or the directory holding it).

    A missing or unreadable file is a :class:`DataError`; another schema or a damaged one a :class:`SchemaError`.
    """
    p = _analysis_path(path)
    return _from_document(_read_document(p), AnalysisResult, ANALYSIS_SCHEMA, str(p))


# ----------------------------------------------------------------------------------------------
# results.json


def write_results(results: Results, path: str | os.PathLike[str]) -> Path:
    """Write ``results.json`` atomically at ``path`` (a file, or a directory to hold it)."""
    p = Path(path)
    p = p / RESULTS_JSON if p.is_dir() else p
    fileio.write_json(p, _document(results, RESULTS_SCHEMA))
    return p


def read_results(path: str | os.PathLike[str]) -> Results:
    """``results.json`` (or ``DIR/results.json``), checked; a missing file says how to make one."""
    p = Path(path)
    p = p / RESULTS_JSON if p.is_dir() else p
    if not p.exists():
        raise DataError(f"{p}: no such results file (run `peanchor reproduce` first, or give the path to results.json)")
    return _from_document(_read_document(p), Results, RESULTS_SCHEMA, str(p))


def results_from_dict(doc: Mapping[str, Any], source: str = "results") -> Results:
    """A :class:`Results` from JSON data already in memory (with its schema fields)."""
    return _from_document(dict(doc), Results, RESULTS_SCHEMA, source)
