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

Beside SSDC, two more lenses on the same passes are per layer: :class:`AttentionDistanceLayers` (per layer and
head) and :class:`PositionProbeLayers` (docs/lenses.md defines both). A new measure of a model is one field: of
:class:`Measures` (per model, at α = 1), :class:`SSDCLayers` (per layer) or :class:`SweepPoint` (per α). It then
travels from analysis.json into every model (or sweep row) of results.json by itself; only :func:`analysis_rows`
lists the CSV's rows by hand.

Imports: :mod:`peanchor.fileio`, :mod:`peanchor.errors`; pydantic lazily (to read).
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import io
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from peanchor import fileio
from peanchor.errors import DataError, SchemaError
from peanchor.fileio import Number  # a measured float: null in a file reads as NaN

__all__ = [
    "ANALYSIS_CSV", "ANALYSIS_JSON", "RESULTS_JSON", "SCHEMA_VERSION", "AnalysisResult", "AnalysisSettings",
    "AttentionDistanceLayers", "FailedCell", "HeadLayers", "LayerPair", "Measures", "ModelInfo", "ModelResult",
    "PositionProbeLayers", "Results", "SSDCLayers", "SweepPoint", "SweepRow", "TrainSummary", "analysis_rows",
    "read_analysis", "read_results", "results_from_dict", "to_json_dict", "write_analysis", "write_results",
]

SCHEMA_VERSION = 2  # 2: attention distance and the position probe; the CSV's head column
ANALYSIS_SCHEMA = "peanchor.analysis"
RESULTS_SCHEMA = "peanchor.results"
ANALYSIS_JSON = "analysis.json"
ANALYSIS_CSV = "analysis.csv"
RESULTS_JSON = "results.json"

_REWRITE = {  # how to make the file again
    ANALYSIS_SCHEMA: "rerun `peanchor analyze` (or `peanchor reproduce`, which analyses such cells again)",
    RESULTS_SCHEMA: "rerun `peanchor report OUT` (or `peanchor reproduce`)",
}
_OMIT = {"omit_if_none": True}  # an optional part that was not measured is absent from the file, not null


def _optional() -> Any:
    return field(default=None, metadata=_OMIT)


# ----------------------------------------------------------------------------------------------
# What one model is measured as


@dataclass(kw_only=True)
class SSDCLayers:
    """SSDC per layer (layer 0 = LN1 of patch embeddings + PE), with tokens in order and under RPI."""

    normal: list[Number]
    rpi: list[Number]  # mean over RPI draws
    rpi_std: list[Number]  # sample std over RPI draws (0 with one draw)
    rpi_draws: list[list[Number]] | None = _optional()  # (draws, layers), with more than one draw
    normal_ci: list[list[Number]] | None = _optional()  # [[low per layer], [high per layer]] (bootstrap)
    rpi_ci: list[list[Number]] | None = _optional()  # the same under RPI, of the first draw
    ci_level: float | None = _optional()

    def max_rpi(self) -> float | None:
        """The highest finite SSDC over layers under RPI."""
        values = [v for v in self.rpi if v == v and abs(v) != float("inf")]
        return max(values) if values else None


@dataclass(kw_only=True)
class LayerPair:
    """A value per layer, with tokens in order and under RPI (mean over RPI draws)."""

    normal: list[Number]
    rpi: list[Number]


@dataclass(kw_only=True)
class HeadLayers:
    """A value per layer and head, ``[layer][head]``, with tokens in order and under RPI (mean over RPI draws)."""

    normal: list[list[Number]]
    rpi: list[list[Number]]

    def layer_means(self, mode: str) -> list[float]:
        """The mean over heads of every layer, for ``mode`` ``"normal"`` or ``"rpi"``."""
        return [sum(heads) / len(heads) if heads else float("nan") for heads in getattr(self, mode)]


@dataclass(kw_only=True)
class AttentionDistanceLayers:
    """Mean attention distance per layer and head, in patches on the slot grid: over query patches and images, the
    attention-weighted distance to the patch keys (prefix tokens excluded as queries, and as keys with the patch
    weights renormalised), Manhattan and Euclidean."""

    manhattan: HeadLayers
    euclidean: HeadLayers
    prefix_mass: HeadLayers  # mean weight the patch queries give the prefix tokens (CLS, registers)
    uniform: dict[str, Number]  # metric → the distance of attention spread evenly over the patches


@dataclass(kw_only=True)
class PositionProbeLayers:
    """Held-out R² per layer of a ridge probe from the layer's patch tokens (the SSDC probe point) to their
    slot's grid row and column, fitted on ``fit_images`` and scored on the other ``heldout_images``."""

    row: LayerPair
    col: LayerPair
    fit_images: int
    heldout_images: int


@dataclass(kw_only=True)
class Measures:
    """What a model is measured as at α = 1; shared by analysis.json and each model of results.json."""

    clean_acc: Number
    rpi_acc: Number  # top-1 under RPI, mean over draws
    ssdc: SSDCLayers
    delta_ssdc: Number  # ssdc.rpi[1] - ssdc.rpi[0]
    acc: dict[str, Number]  # shift name → top-1
    fragility: dict[str, Number]  # shift name → 1 - acc / clean_acc
    severities: dict[str, list[Number]] | None = _optional()  # kind → top-1 at severity 1..5
    severity_fragility: dict[str, list[Number]] | None = _optional()
    attention_distance: AttentionDistanceLayers | None = _optional()  # absent where the weights cannot be had
    position_probe: PositionProbeLayers | None = _optional()  # absent with fewer than 2 images


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
    """How an analysis was made: the settings of its :class:`peanchor.analysis.plan.AnalysisPlan` (its shifts are
    the result's ``shifts`` and ``shift_sources``), what a reused analysis must agree with."""

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
    max_images: int | None = None  # the evaluation subset's size (None: every image)
    lenses: list[str] | None = None  # the lenses reported (None, in files written before it was recorded: all three)


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

    def save(self, out_dir: str | os.PathLike[str]) -> Path:
        """Write ``analysis.json`` and ``analysis.csv`` into ``out_dir`` (:func:`write_analysis`); returns the JSON."""
        return write_analysis(self, out_dir)


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


# ----------------------------------------------------------------------------------------------
# JSON


def to_json_dict(record: Any) -> Any:
    """A record as plain JSON data: dataclasses become objects (unmeasured optional parts left out)."""
    if dataclasses.is_dataclass(record) and not isinstance(record, type):
        out = {}
        for f in dataclasses.fields(record):
            value = getattr(record, f.name)
            if not (value is None and f.metadata.get("omit_if_none")):
                out[f.name] = to_json_dict(value)
        return out
    if isinstance(record, (list, tuple)):
        return [to_json_dict(v) for v in record]
    if isinstance(record, dict):
        return {str(k): to_json_dict(v) for k, v in record.items()}
    return record


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
    from pydantic import ValidationError

    if not isinstance(doc, dict):
        raise SchemaError(f"{source}: expected a JSON object at the top level, got {type(doc).__name__}")
    if doc.get("schema") != schema or "schema_version" not in doc:
        found = f"schema {doc['schema']!r}" if "schema" in doc else "no schema field"
        raise SchemaError(
            f"{source}: not a {schema} file ({found}); it was written by another tool or by a peanchor older than "
            f"the versioned result files: {_REWRITE[schema]} to rewrite it"
        )
    if doc["schema_version"] != SCHEMA_VERSION:
        raise SchemaError(
            f"{source}: {schema} schema_version {doc['schema_version']!r}, but this peanchor reads version "
            f"{SCHEMA_VERSION}: {_REWRITE[schema]} with this peanchor, or use the peanchor that wrote it"
        )
    body = {k: v for k, v in doc.items() if k not in ("schema", "schema_version")}
    try:
        return _adapter(cls).validate_json(json.dumps(body), strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        loc = tuple(first["loc"])
        if first["type"] == "missing":
            parent = _where(loc[:-1]) or "the top level"
            raise SchemaError(f"{source}: {parent} is missing required key '{loc[-1]}'") from None
        raise SchemaError(f"{source}: {_where(loc)}: {first['msg']} (got {first.get('input')!r})") from None


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
    """One row per (metric, layer / α / shift / severity) of an analysis: the long format of ``analysis.csv``."""

    def row(metric: str, value: Any, layer: Any = "", alpha: Any = 1.0, shift: str = "", severity: Any = "",
            head: Any = "") -> dict:  # fmt: skip
        return {"metric": metric, "layer": layer, "head": head, "alpha": alpha, "shift": shift, "severity": severity,
                "value": value}  # fmt: skip

    yield row("clean_acc", result.clean_acc)
    yield row("rpi_acc", result.rpi_acc)
    for key in ("normal", "rpi", "rpi_std"):
        for layer, v in enumerate(getattr(result.ssdc, key)):
            yield row(f"ssdc_{key}", v, layer=layer)
    for key in ("normal_ci", "rpi_ci"):
        bounds = getattr(result.ssdc, key)
        for bound, values in zip(("low", "high"), bounds or []):
            for layer, v in enumerate(values):
                yield row(f"ssdc_{key}_{bound}", v, layer=layer)
    yield row("delta_ssdc", result.delta_ssdc)
    distance = result.attention_distance
    for key in ("manhattan", "euclidean", "prefix_mass") if distance else ():
        name = "attention_prefix_mass" if key == "prefix_mass" else f"attention_distance_{key}"
        for mode in ("normal", "rpi"):
            for layer, heads in enumerate(getattr(getattr(distance, key), mode)):
                for head, v in enumerate(heads):
                    yield row(f"{name}_{mode}", v, layer=layer, head=head)
    for metric, v in (distance.uniform if distance else {}).items():
        yield row(f"attention_distance_{metric}_uniform", v)
    for target in ("row", "col") if result.position_probe else ():
        for mode in ("normal", "rpi"):
            for layer, v in enumerate(getattr(getattr(result.position_probe, target), mode)):
                yield row(f"probe_r2_{target}_{mode}", v, layer=layer)
    for name, v in result.acc.items():
        yield row("acc", v, shift=name)
        yield row("fragility", result.fragility[name], shift=name)
    for kind, accs in (result.severities or {}).items():
        for i, a in enumerate(accs):
            yield row("acc", a, shift=kind, severity=i + 1)
            yield row("fragility", (result.severity_fragility or {})[kind][i], shift=kind, severity=i + 1)
    for e in result.alpha_sweep:
        yield row("sweep_delta_ssdc", e.delta_ssdc, alpha=e.alpha)
        yield row("sweep_clean_acc", e.clean_acc, alpha=e.alpha)
        for name, v in e.acc.items():
            yield row("sweep_acc", v, alpha=e.alpha, shift=name)
            yield row("sweep_fragility", e.fragility[name], alpha=e.alpha, shift=name)


def _csv_text(rows: Iterator[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(CSV_COLUMNS), lineterminator="\n")
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
    fileio.write_text(out / ANALYSIS_CSV, _csv_text(analysis_rows(result)))
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
