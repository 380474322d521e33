"""The result files' schema: typed records for ``analysis.json`` (one model's analysis, with its tidy
``analysis.csv``) and ``results.json`` (a grid's models and α-sweep points), and the only code that writes and
reads them.

::

    AnalysisResult(Measures)   analysis.json: what evaluate_model measured, how, and on what
    ModelResult(Measures)      one model of results.json: the cell it is, its training, its Measures
    SweepRow(SweepPoint)       one α-sweep point of results.json
    Results                    results.json

Every file carries ``schema`` (``peanchor.analysis`` / ``peanchor.results.records``) and ``schema_version``
(:data:`ANALYSIS_SCHEMA_VERSION`, :data:`RESULTS_SCHEMA_VERSION`); reading a file of a version this peanchor does not
read, or another tool's, is one :class:`SchemaError` line. The versions, their layouts and the reading of an older
one are :mod:`peanchor.results.schema`'s.
What is read is validated by pydantic against these dataclasses (strict JSON types), so a damaged file names the
first key at fault; an undefined number (NaN, ±inf: FS at 0 clean accuracy) is ``null`` and reads back as NaN.
``fragility`` is exactly ``1 - acc / clean_acc`` (NaN, with the reason in ``fragility_undefined``, where the clean
accuracy is not above chance by its interval) and ``delta_ssdc`` exactly ``ssdc.rpi[1] - ssdc.rpi[0]``. The
intervals (``*_ci``: ``[low, high]``, per layer ``[[low...], [high...]]``) come from the analysis's one bootstrap over
groups of images (:mod:`peanchor.metrics.bootstrap`); they are optional, absent in older files.

A model's measures per layer are its lenses' records (:mod:`peanchor.lenses`: SSDC, the position probe, the
attention distance, ...): :attr:`Measures.lenses` holds them by lens name; ``analysis.json`` holds them under
``lenses`` by name, each model of ``results.json`` at its top level, validated against the lens's ``record_type``
when read (a lens with ``required`` set must be there). A new lens therefore needs nothing here. Any other new
measure of a model is one field: of :class:`Measures` (per model, at α = 1) or :class:`SweepPoint` (per α). It then
travels from analysis.json into every model (or sweep row) of results.json by itself; the CSV's rows are listed in
:func:`analysis_rows`.

:class:`AnalysisSettings` is made from the analysis plan's settings (:mod:`peanchor.settings.plan`), plus where the
analysis ran: the settings are spelled there only.

Imports: :mod:`peanchor.core.fileio`, :mod:`peanchor.core.errors`, :mod:`peanchor.lenses` (the records),
:mod:`peanchor.results.schema` (versions, layouts, reading), :mod:`peanchor.settings.plan` (the settings),
:mod:`peanchor.results.doses` (``dose_sweeps``), :mod:`peanchor.results.resolution` (``resolution``);
:mod:`peanchor.results.tables` lazily (``to_pandas``, the summary a
notebook shows).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from peanchor.core import fileio
from peanchor.core.errors import DataError
from peanchor.core.fileio import Number  # a measured float: null in a file reads as NaN
from peanchor.results.frames import CSV_COLUMNS
from peanchor.results.doses import DOSE_COLUMNS, LENS_MAP, DoseSweep
from peanchor.results.resolution import ResolutionSweep
from peanchor.lenses import HeadLayers, LayerPair, LensFailure, UnknownLensRecord
from peanchor.lenses.attention_distance import AttentionDistanceLayers
from peanchor.lenses.position_probe import PositionProbeLayers
from peanchor.lenses.ssdc import SSDCLayers
from peanchor.settings.plan import setting_fields
from peanchor.results.schema import (
    ANALYSIS_SCHEMA,
    LENSES_KEY,
    RESULTS_SCHEMA,
    WRITTEN,
    lens_records,
    nests_lenses,
    read_document,
    schema_body,
    validate,
)

__all__ = [
    "ANALYSIS_CSV", "ANALYSIS_JSON", "ANALYSIS_SCHEMA_VERSION", "RESULTS_JSON", "RESULTS_SCHEMA_VERSION",
    "SCHEMA_VERSION", "AnalysisResult", "AlphaTrend", "AnalysisSettings", "AttentionDistanceLayers", "FailedCell", "HeadLayers", "LayerPair", "Measures", "ModelInfo", "ModelResult",
    "PositionProbeLayers", "Results", "SSDCLayers", "SweepPoint", "SweepRow", "TrainSummary", "analysis_rows",
    "read_analysis", "read_results", "results_from_dict", "to_json_dict", "write_analysis", "write_results",
]

ANALYSIS_SCHEMA_VERSION = WRITTEN[ANALYSIS_SCHEMA]  # 3: the lens records under "lenses"
RESULTS_SCHEMA_VERSION = WRITTEN[RESULTS_SCHEMA]  # 2: attention distance and the position probe; the CSV's head column
SCHEMA_VERSION = RESULTS_SCHEMA_VERSION  # results.json's (analysis.json's is ANALYSIS_SCHEMA_VERSION)
ANALYSIS_JSON = "analysis.json"
ANALYSIS_CSV = "analysis.csv"
RESULTS_JSON = "results.json"

_OMIT = {"omit_if_none": True}  # an optional part that was not measured is absent from the file, not null
_LENS_RECORDS = {"lens_records": True}  # the lens records: under "lenses" in analysis.json, at the top in results.json


def _optional() -> Any:
    return field(default=None, metadata=_OMIT)


# ----------------------------------------------------------------------------------------------
# What one model is measured as


@dataclass(kw_only=True)
class Measures:
    """What a model is measured as at α = 1; shared by analysis.json and each model of results.json."""

    clean_acc: Number
    rpi_acc: Number  # top-1 under RPI, mean over draws
    # lens name → its record (peanchor.lenses); analysis.json: under "lenses"; results.json: at a model's top level
    lenses: dict[str, Any] = field(default_factory=dict, metadata=_LENS_RECORDS)
    delta_ssdc: Number  # ssdc.rpi[1] - ssdc.rpi[0]
    acc: dict[str, Number]  # shift name → top-1
    fragility: dict[str, Number]  # shift name → 1 - acc / clean_acc (NaN at chance: fragility_undefined)
    severities: dict[str, list[Number]] | None = _optional()  # kind → top-1 at severity 1..5
    severity_fragility: dict[str, list[Number]] | None = _optional()
    dose_sweeps: list[DoseSweep] | None = _optional()  # the --sweep dose-responses (peanchor.results.doses)
    resolution: ResolutionSweep | None = _optional()  # top-1 at other image sizes (peanchor.results.resolution)
    # The intervals of the groups bootstrap (peanchor.metrics.bootstrap), all from one resampling: [low, high]
    ci_level: Number | None = _optional()
    clean_acc_ci: list[Number] | None = _optional()
    rpi_acc_ci: list[Number] | None = _optional()  # over images and RPI draws
    delta_ssdc_ci: list[Number] | None = _optional()  # joint: the replicates of layer 1 - layer 0
    acc_ci: dict[str, list[Number]] | None = _optional()  # shift name → [low, high]
    fragility_ci: dict[str, list[Number]] | None = _optional()  # paired: clean and shifted on the same resample
    chance: Number | None = _optional()  # 1 / the number of classes
    fragility_undefined: dict[str, str] | None = _optional()  # shift → why its FS is NaN (clean accuracy at chance)

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
    delta_ssdc_ci: list[Number] | None = _optional()  # [low, high], as Measures' (same resampling)
    clean_acc_ci: list[Number] | None = _optional()
    fragility_ci: dict[str, list[Number]] | None = _optional()
    fragility_undefined: dict[str, str] | None = _optional()


@dataclass(kw_only=True)
class AlphaTrend:
    """A measure's least-squares slope against α over the sweep's points that are not degenerate, with its interval
    from the analysis's bootstrap (the slope of each replicate's points)."""

    slope: Number  # NaN with fewer than two points
    ci: list[Number] | None  # [low, high]; None without a bootstrap or a slope
    alphas: list[Number]  # the α values the slope is fitted on
    excluded: dict[str, str]  # str(α) → why it is left out (identical by construction, clean accuracy at chance)


@dataclass(kw_only=True)
class ModelInfo:
    pe: str | None
    depth: int
    grid: list[int]
    scalable: bool  # whether α means anything for its PE


def _settings_record() -> type:
    """The dataclass of ``analysis.json``'s ``settings``: every setting of the analysis plan
    (:class:`~peanchor.settings.plan.PlanSettings`, as JSON types: lists for tuples; None where an older file lacks
    it), then the evaluation set's fingerprint and the device."""
    fields: list[tuple[str, Any, Any]] = []
    for s in setting_fields():
        fields.append((s.name, s.record_type, _optional() if s.optional_in_files else field()))
    fields += [("evalset", str, field()), ("device", str, field())]  # the images' fingerprint; where it ran
    cls = dataclasses.make_dataclass("AnalysisSettings", fields, kw_only=True)
    cls.__module__ = __name__
    cls.__doc__ = ("How an analysis was made: its :class:`~peanchor.analysis.plan.AnalysisPlan`'s settings "
                   "(:class:`~peanchor.settings.plan.PlanSettings`), shifts aside, and ``evalset`` and ``device``.")
    return cls


AnalysisSettings = _settings_record()


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
    alpha_trends: dict[str, AlphaTrend] | None = _optional()  # "delta_ssdc", "clean_acc", "fragility.<shift>"
    # where the analysis ran: peanchor, torch and Python versions, git commit, CPU kernels or GPU; absent in older files
    environment: dict[str, str] | None = _optional()

    def save(self, out_dir: str | os.PathLike[str]) -> Path:
        """Write ``analysis.json`` and ``analysis.csv`` into ``out_dir`` (:func:`write_analysis`); returns the JSON."""
        return write_analysis(self, out_dir)

    def to_pandas(self) -> Any:
        """The rows of ``analysis.csv`` as a pandas DataFrame, numeric columns float64 (:mod:`peanchor.results.tables`)."""
        from peanchor.results.frames import analysis_frame

        return analysis_frame(self)

    def __repr__(self) -> str:
        from peanchor.results.frames import summary_repr

        return summary_repr(self)

    def _repr_html_(self) -> str:  # a notebook shows the summary table
        from peanchor.results.frames import summary_html

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
    alpha_trends: dict[str, AlphaTrend] | None = _optional()  # the analysis's (AnalysisResult.alpha_trends)
    # How its analysis was made and on what, for the report's provenance and its check that the models compared
    # were measured alike (absent in older files): the analysis's settings, source (model_args, data) and
    # environment, and its number of images.
    analysis_settings: dict[str, Any] | None = _optional()
    source: dict[str, Any] | None = _optional()
    environment: dict[str, str] | None = _optional()
    num_images: int | None = _optional()

    @classmethod
    def from_analysis(cls, analysis: AnalysisResult, cell: CellId, train: TrainSummary, run_dir: str) -> ModelResult:
        measures = {f.name: getattr(analysis, f.name) for f in dataclasses.fields(Measures)}
        return cls(**dataclasses.asdict(cell), **measures, train=train, run_dir=run_dir,
                   analysis_seconds=analysis.seconds, forward_passes=analysis.forward_passes,
                   alpha_trends=analysis.alpha_trends, analysis_settings=to_json_dict(analysis.settings),
                   source=dict(analysis.source or {}), environment=analysis.environment,
                   num_images=analysis.num_images)  # fmt: skip


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
        """Every model's ``analysis.csv`` rows, led by its name, condition, seed, PE and RPT (:mod:`peanchor.results.tables`)."""
        from peanchor.results.frames import results_frame

        return results_frame(self)


# ----------------------------------------------------------------------------------------------
# JSON


def to_json_dict(record: Any, nest_lenses: bool = False) -> Any:
    """A record as plain JSON data: dataclasses become objects (unmeasured optional parts left out). Its lens
    records go under ``lenses`` with ``nest_lenses`` (analysis.json), else each at the top under its lens's name."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        out = {}
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            if f.metadata.get("lens_records"):
                records = {name: _lens_record_json(r) for name, r in value.items()}
                out.update({LENSES_KEY: records} if nest_lenses else records)
            elif f.metadata.get(LENS_MAP):  # a dose's lens records (peanchor.results.doses), under the field's name
                out[f.name] = {name: _lens_record_json(r) for name, r in value.items()}
            elif not (value is None and f.metadata.get("omit_if_none")):
                out[f.name] = to_json_dict(value, nest_lenses)
        return out
    if isinstance(record, (list, tuple)):
        return [to_json_dict(v, nest_lenses) for v in record]
    if isinstance(record, dict):
        return {str(k): to_json_dict(v, nest_lenses) for k, v in record.items()}
    return record


def _lens_record_json(record: Any) -> Any:
    if isinstance(record, LensFailure):
        return str(record)  # "failed: <error>"
    if isinstance(record, UnknownLensRecord):
        return record.data  # as it was read
    return to_json_dict(record)


def _document(record: Any, schema: str) -> dict[str, Any]:
    version = WRITTEN[schema]
    return {"schema": schema, "schema_version": version, **to_json_dict(record, nests_lenses(schema, version))}


R = TypeVar("R")


def _from_document(doc: Any, cls: type[R], schema: str, source: str) -> R:
    """Check the schema fields, then validate the rest of ``doc`` into ``cls``, its lens records taken from the
    layout of its version (:mod:`peanchor.results.schema`); one line for the first fault."""
    body, version = schema_body(doc, schema, source)
    nested = nests_lenses(schema, version)
    if cls is AnalysisResult:
        body, records = lens_records(body, (), source, _field_names(AnalysisResult), nested)
        result = validate(cls, body, source)
        result.lenses = records  # type: ignore[attr-defined]
        return result
    models = body.get("models")
    split = [lens_records(m, ("models", i), source, _field_names(ModelResult), nested) if isinstance(m, dict)
             else (m, {}) for i, m in enumerate(models if isinstance(models, list) else [])]  # fmt: skip
    if split:
        body = {**body, "models": [m for m, _ in split]}
    out = validate(cls, body, source)
    for model, (_, records) in zip(getattr(out, "models", []), split):
        model.lenses = records
    return out


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls))


# ----------------------------------------------------------------------------------------------
# analysis.json and analysis.csv



def analysis_rows(result: AnalysisResult) -> Iterator[dict[str, Any]]:
    """One row per (metric, layer / α / shift / severity) of an analysis: ``analysis.csv``'s long format; a column
    that does not apply is None (:func:`peanchor.results.tables.measure_rows`)."""
    from peanchor.results.frames import measure_rows

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

    Returns:
        The :class:`AnalysisResult` the file holds.
    """
    p = _analysis_path(path)
    return _from_document(read_document(p), AnalysisResult, ANALYSIS_SCHEMA, str(p))


# ----------------------------------------------------------------------------------------------
# results.json


def write_results(results: Results, path: str | os.PathLike[str]) -> Path:
    """Write ``results.json`` atomically at ``path`` (a file, or a directory to hold it)."""
    p = Path(path)
    p = p / RESULTS_JSON if p.is_dir() else p
    fileio.write_json(p, _document(results, RESULTS_SCHEMA))
    return p


def read_results(path: str | os.PathLike[str]) -> Results:
    """``results.json`` (or ``DIR/results.json``), checked; a missing file says how to make one.

    Returns:
        The :class:`Results` grid the file holds.
    """
    p = Path(path)
    p = p / RESULTS_JSON if p.is_dir() else p
    if not p.exists():
        raise DataError(f"{p}: no such results file (run `peanchor reproduce` first, or give the path to results.json)")
    return _from_document(read_document(p), Results, RESULTS_SCHEMA, str(p))


def results_from_dict(doc: Mapping[str, Any], source: str = "results") -> Results:
    """A :class:`Results` from JSON data already in memory (with its schema fields)."""
    return _from_document(dict(doc), Results, RESULTS_SCHEMA, source)
