"""The result files' versions and layouts, and reading a document back into its dataclasses: the part of
:mod:`peanchor.results.records` that knows how files of every readable version look.

======================  =======  ==============================================================================
file                    version  layout
======================  =======  ==============================================================================
``analysis.json``       3        the lens records nest under ``lenses`` (``{"lenses": {"ssdc": {...}, ...}}``)
``analysis.json``       2        the lens records at the top level, each under its lens's name (read, not written)
``results.json``        2        each model's lens records at the model's top level (unchanged)
======================  =======  ==============================================================================

A file is checked here (``schema``, a readable ``schema_version``), its lens records are taken out of whichever
layout it has and validated one by one against their lens's ``record_type``, and the rest is validated by pydantic
against the record's dataclass in strict JSON mode; the first fault is one :class:`SchemaError` line naming the file
and the key. An older ``analysis.json`` is therefore read as the same measurements and written back in the current
layout by :func:`peanchor.results.records.write_analysis`; the record of a lens that is not installed here is kept as it
was read (:class:`~peanchor.lenses.UnknownLensRecord`) in either layout.

Imports: :mod:`peanchor.lenses` (the registry, :class:`LensFailure`, :class:`UnknownLensRecord`),
:mod:`peanchor.core.errors`; pydantic lazily (to read).
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

from peanchor.core.errors import DataError, SchemaError
from peanchor.lenses import LENSES, LensFailure, UnknownLensRecord

__all__ = ["ANALYSIS_SCHEMA", "LENSES_KEY", "READABLE", "RESULTS_SCHEMA", "WRITTEN", "lens_records", "nests_lenses",
           "read_document", "schema_body", "validate"]  # fmt: skip

ANALYSIS_SCHEMA = "peanchor.analysis"
RESULTS_SCHEMA = "peanchor.results.records"
#: The version each schema is written in: analysis.json 3 (the lens records under ``lenses``), results.json 2.
WRITTEN: dict[str, int] = {ANALYSIS_SCHEMA: 3, RESULTS_SCHEMA: 2}
#: The versions read (2: attention distance and the position probe, the CSV's head column; 1 is not read).
READABLE: dict[str, tuple[int, ...]] = {ANALYSIS_SCHEMA: (2, 3), RESULTS_SCHEMA: (2,)}
#: From which version a schema holds a model's lens records under ``lenses`` (results.json: not yet).
_NESTED_FROM: dict[str, int] = {ANALYSIS_SCHEMA: 3}
LENSES_KEY = "lenses"

_REWRITE = {  # how to make the file again
    ANALYSIS_SCHEMA: "rerun `peanchor analyze` (or `peanchor reproduce`, which analyses such cells again)",
    RESULTS_SCHEMA: "rerun `peanchor report OUT` (or `peanchor reproduce`)",
}


def nests_lenses(schema: str, version: int) -> bool:
    """Whether a ``schema`` file of ``version`` holds its lens records under ``lenses``.

    >>> nests_lenses("peanchor.analysis", 3), nests_lenses("peanchor.analysis", 2), nests_lenses("peanchor.results.records", 2)
    (True, False, False)
    """
    return version >= _NESTED_FROM.get(schema, version + 1)


def _versions_text(versions: tuple[int, ...]) -> str:
    return f"version {versions[0]}" if len(versions) == 1 else f"versions {', '.join(map(str, versions))}"


def schema_body(doc: Any, schema: str, source: str) -> tuple[dict[str, Any], int]:
    """``doc`` without its ``schema`` and ``schema_version``, and that version, once both are checked: another
    tool's file, or a version this peanchor does not read, is one :class:`SchemaError` line saying how to remake it."""
    if not isinstance(doc, dict):
        raise SchemaError(f"{source}: expected a JSON object at the top level, got {type(doc).__name__}")
    if doc.get("schema") != schema or "schema_version" not in doc:
        found = f"schema {doc['schema']!r}" if "schema" in doc else "no schema field"
        raise SchemaError(
            f"{source}: not a {schema} file ({found}); it was written by another tool or by a peanchor older than "
            f"the versioned result files: {_REWRITE[schema]} to rewrite it"
        )
    version = doc["schema_version"]
    if version not in READABLE[schema] or isinstance(version, bool):
        raise SchemaError(
            f"{source}: {schema} schema_version {version!r}, but this peanchor reads {_versions_text(READABLE[schema])}"
            f": {_REWRITE[schema]} with this peanchor, or use the peanchor that wrote it"
        )
    return {k: v for k, v in doc.items() if k not in ("schema", "schema_version")}, int(version)


R = TypeVar("R")


@functools.cache
def _adapter(cls: type) -> Any:  # pydantic.TypeAdapter, built on first read
    from pydantic import TypeAdapter

    return TypeAdapter(cls)


def where(loc: tuple[Any, ...]) -> str:
    """A place in a document as a key path: ``("models", 0, "ssdc")`` → ``models[0].ssdc``."""
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")


def validate(cls: type[R], data: Any, source: str, at: tuple[Any, ...] = ()) -> R:
    """``data`` validated into ``cls`` (strict JSON types); the first fault is one :class:`SchemaError` line, its
    place prefixed with ``at``."""
    from pydantic import ValidationError

    try:
        return _adapter(cls).validate_json(json.dumps(data), strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        loc = (*at, *first["loc"])
        if first["type"] == "missing":
            parent = where(loc[:-1]) or "the top level"
            raise SchemaError(f"{source}: {parent} is missing required key '{loc[-1]}'") from None
        raise SchemaError(f"{source}: {where(loc)}: {first['msg']} (got {first.get('input')!r})") from None


def lens_records(doc: dict[str, Any], at: tuple[Any, ...], source: str, fields: frozenset[str],
                 nested: bool) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """A model's measures as written (at ``at``): the object without its lenses' records, and those records, each
    validated against its lens's ``record_type`` (or a :class:`LensFailure`). With ``nested`` the records are the
    object under ``lenses``; without, every top-level key that is not one of ``fields`` (the record type's own).
    A required lens (SSDC) must be there. A record of a lens not installed here is kept as it is
    (:class:`UnknownLensRecord`), with one warning."""
    if nested:
        written = doc.get(LENSES_KEY)
        if not isinstance(written, Mapping):
            got = "nothing" if written is None else type(written).__name__
            raise SchemaError(f"{source}: {where((*at, LENSES_KEY))}: expected an object of lens records, got {got}")
        rest = {k: v for k, v in doc.items() if k != LENSES_KEY}
        place = (*at, LENSES_KEY)
    else:
        written = {k: v for k, v in doc.items() if k not in fields}
        rest = {k: v for k, v in doc.items() if k in fields}
        place = at
    missing = [name for name, lens in LENSES.items() if lens.required and written.get(name) is None]
    if missing:
        raise SchemaError(f"{source}: {where(place) or 'the top level'} is missing required key '{missing[0]}'")
    records: dict[str, Any] = {}
    for name, lens in LENSES.items():
        value = written.get(name)
        if value is None:
            continue
        failure = None if lens.required else LensFailure.parse(value)
        records[name] = failure or validate(lens.record_type, value, source, (*place, name))
    if unknown := [k for k in written if k not in LENSES]:
        records.update((k, UnknownLensRecord(written[k])) for k in unknown)
        warnings.warn(f"{source}: {where(at) or 'the file'} holds the record of {', '.join(map(repr, unknown))}, "
                      "a lens not installed here: kept as it is, not measured or reported", stacklevel=5)  # fmt: skip
    return rest, records


def read_document(path: Path) -> Any:
    """The JSON at ``path``: a missing or unreadable file is a :class:`DataError`, invalid JSON a
    :class:`SchemaError` naming the line and column."""
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
