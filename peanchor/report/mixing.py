"""Whether the analyses a report compares were made alike: which settings differ, in one line, and a refusal
when the comparison would be meaningless.

Meaningless: models measured on different images (``settings.evalset``, the fingerprint of the exact pixels), or
with different permutations behind RPI (``rpi_mode``, ``seed``, ``rpi_draws``; and, where RPI draws one
permutation per forward call, ``batch_size``, which sets how many permutations an estimate averages over). Such a
comparison is refused unless the caller allows it (``--allow-mixed``, ``allow_mixed=True``). Any other setting
that differs (the α grid among models that have one, the bootstrap, the lenses, ...) is named but allowed. The
device is a record, not a setting.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import json
from typing import Any

from peanchor.core.errors import DataError
from peanchor.results.records import ModelResult, Results

__all__ = ["ALLOW_FLAG", "check_comparable", "setting_values"]

ALLOW_FLAG = "--allow-mixed"
OLD_RPI_MODE = "per_call"  # an analysis from before rpi_mode was recorded drew one permutation per forward call
_RECORDS = ("device",)  # where it ran: not a setting


def _settings(m: ModelResult, results: Results) -> dict[str, Any]:
    settings = dict(m.analysis_settings or results.analysis or {})
    if settings:
        settings.setdefault("rpi_mode", OLD_RPI_MODE)
    return settings


def setting_values(results: Results) -> dict[str, dict[str, list[str]]]:
    """Setting → its value (as JSON text) → the models with it, for every setting whose value differs between the
    models (the α grid compared only among models that have one)."""
    per_model = {m.name: _settings(m, results) for m in results.models}
    known = [s for s in per_model.values() if s]
    keys = list(dict.fromkeys(k for s in known for k in s if k not in _RECORDS))
    out: dict[str, dict[str, list[str]]] = {}
    for key in keys:
        values: dict[str, list[str]] = {}
        for name, s in per_model.items():
            if not s or (key == "alphas" and not s.get(key)):  # no α sweep: a PE that α does not scale
                continue
            values.setdefault(json.dumps(s.get(key), sort_keys=True), []).append(name)
        if len(values) > 1:
            out[key] = values
    return out


def _meaningless(differ: dict[str, dict[str, list[str]]], results: Results) -> list[str]:
    keys = [k for k in ("evalset", "rpi_mode", "seed", "rpi_draws") if k in differ]
    per_call = any(_settings(m, results).get("rpi_mode") == OLD_RPI_MODE for m in results.models)
    if per_call and "batch_size" in differ:
        keys.append("batch_size")
    return keys


def _describe(key: str, values: dict[str, list[str]]) -> str:
    shown = "; ".join(f"{text if len(text) <= 40 else text[:37] + '...'}: {', '.join(names)}"
                      for text, names in values.items())  # fmt: skip
    return f"{key} ({shown})"


def check_comparable(results: Results, allow_mixed: bool = False) -> str | None:
    """One line naming the settings that differ between the analyses of ``results`` (None when none does);
    a :class:`DataError` naming :data:`ALLOW_FLAG` when the comparison would be meaningless and is not allowed."""
    differ = setting_values(results)
    if not differ:
        return None
    bad = _meaningless(differ, results)
    if bad and not allow_mixed:
        why = ("different images" if "evalset" in bad else "") + (" and " if "evalset" in bad and len(bad) > 1 else "")
        why += "different permutations behind RPI" if any(k != "evalset" for k in bad) else ""
        verb = "differs" if len(bad) == 1 else "differ"
        raise DataError(f"the analyses compared were made with {why} ({', '.join(bad)} {verb}), so their comparison "
                        f"would be meaningless; pass {ALLOW_FLAG} (allow_mixed=True in Python) to compare them "
                        "anyway")  # fmt: skip
    return "settings that differ between the analyses compared: " + "; ".join(
        _describe(k, v) for k, v in differ.items())
