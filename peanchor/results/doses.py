"""The records of a dose-response sweep (``--sweep``, docs/interventions.md): :class:`DoseSweep` and its
:class:`DosePoint`s, the ``dose_sweeps`` of ``analysis.json`` (and of each model of ``results.json``), and their
long rows (:func:`dose_rows`) for ``analysis.csv`` and ``to_pandas()``.

A dose holds what the main analysis holds at α = 1, measured under the base edits plus the dose's edit: top-1 with
tokens in order and under RPI, top-1 and the Fragility Score under each of the plan's shifts, and every lens's record
(or its :class:`~peanchor.lenses.LensFailure`). In the files a dose's lens records sit under its ``lenses`` key,
each as the main analysis writes it (``"failed: ..."`` for a failure), and are read back against their lens's
``record_type``; a record of a lens not installed here is kept as it is.

Imports: :mod:`peanchor.core.fileio` (``Number``), :mod:`peanchor.lenses` (the records); pydantic lazily (to read).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from peanchor.core.fileio import Number
from peanchor.lenses import LENSES, LensFailure, UnknownLensRecord

__all__ = ["DOSE_COLUMNS", "DosePoint", "DoseSweep", "dose_rows", "read_lens_records"]

#: The columns ``analysis.csv`` gets (after its own) when the analysis has sweeps: the sweep's text, the dose.
DOSE_COLUMNS: tuple[str, ...] = ("sweep", "dose")
#: Field metadata: a mapping lens name → record, written as the main analysis writes each record.
LENS_MAP = "lens_map"


def read_lens_records(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Lens name → record from a file's object: each validated against its lens's ``record_type`` (strict JSON
    types), a ``"failed: ..."`` string as a :class:`LensFailure`, a lens not installed here kept as it is."""
    from pydantic import TypeAdapter, ValidationError

    out: dict[str, Any] = {}
    for name, value in doc.items():
        lens = LENSES.get(name)
        if lens is None:
            out[name] = UnknownLensRecord(value)
            continue
        failure = None if lens.required else LensFailure.parse(value)
        if failure is not None:
            out[name] = failure
            continue
        try:
            out[name] = TypeAdapter(lens.record_type).validate_json(json.dumps(value), strict=True)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(p) for p in (name, *first["loc"]))
            raise ValueError(f"{where}: {first['msg']}") from None
    return out


class _LensRecords:
    """Pydantic metadata of :data:`LensRecords`: the mapping read by :func:`read_lens_records`."""

    def __get_pydantic_core_schema__(self, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema  # lazily: only readers of result files validate

        return core_schema.no_info_after_validator_function(read_lens_records, handler(source))


LensRecords = Annotated[dict[str, Any], _LensRecords()]


@dataclass(kw_only=True)
class DosePoint:
    """One dose of a sweep: the analysis's numbers at α = 1 under the base edits and this dose's edit."""

    dose: str  # the swept parameter's value as the sweep writes it ("0-3", "14x14", a union "0+2")
    spec: str  # the dose's edit, every parameter spelled out
    grid: list[int]  # the patch grid the dose ran at (pe_resample moves it)
    clean_acc: Number
    rpi_acc: Number  # mean over RPI draws
    acc: dict[str, Number]  # shift name → top-1
    fragility: dict[str, Number]  # shift name → 1 - acc / clean_acc
    lenses: LensRecords = field(default_factory=dict, metadata={LENS_MAP: True})
    fragility_undefined: dict[str, str] | None = field(default=None, metadata={"omit_if_none": True})  # shift → why
    # its FS is NaN (the clean accuracy is not above chance by its interval)

    def lens(self, name: str) -> Any:
        """Lens ``name``'s record at this dose; None where it was not measured or failed."""
        record = self.lenses.get(name)
        return None if isinstance(record, (LensFailure, UnknownLensRecord)) else record


@dataclass(kw_only=True)
class DoseSweep:
    """One ``--sweep``: every dose's numbers, in the order given."""

    sweep: str  # the sweep's text, ranges expanded (peanchor.interventions.SweepSpec.text)
    kind: str
    parameter: str  # the swept parameter
    base: list[str]  # the plan's edits, which every dose's edit follows
    doses: list[DosePoint]
    forward_passes: int  # model calls over the set, every image set, RPI draw and lens setting (base passes too)
    passes_per_batch: int  # of those, per batch and setting: the doses plus the base pass (at most k + 1)


def dose_rows(sweeps: Iterable[DoseSweep]) -> Iterator[dict[str, Any]]:
    """The long rows of ``sweeps`` (``analysis.csv``'s columns and :data:`DOSE_COLUMNS`): ``dose_clean_acc``,
    ``dose_rpi_acc``, ``dose_acc`` and ``dose_fragility`` per shift, and each lens's rows as ``dose_<metric>``."""
    for sweep in sweeps:
        for point in sweep.doses:

            def row(metric: str, value: Any, layer: Any = None, shift: str | None = None, head: Any = None) -> dict:
                return {"metric": metric, "layer": layer, "head": head, "alpha": 1.0, "shift": shift,
                        "severity": None, "value": value, "sweep": sweep.sweep, "dose": point.dose}  # fmt: skip

            yield row("dose_clean_acc", point.clean_acc)
            yield row("dose_rpi_acc", point.rpi_acc)
            for name, v in point.acc.items():
                yield row("dose_acc", v, shift=name)
                yield row("dose_fragility", point.fragility[name], shift=name)
            for name, lens in LENSES.items():
                record = point.lens(name)
                for r in lens.rows(record) if record is not None else ():
                    yield row(f"dose_{r.metric}", r.value, layer=None if r.layer == "" else r.layer,
                              head=None if r.head == "" else r.head)  # fmt: skip
