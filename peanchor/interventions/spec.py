"""The text of an edit spec (``kind:key=value,key=value``) and the readers of its values.

A spec names one edit kind and its parameters. Values that are sets of indices (``layers=``, ``heads=``,
``freqs=``) may themselves hold commas: a comma-separated piece without ``=`` continues the value before it, so
``head_ablate:layers=0,2,heads=1-3`` sets ``layers`` to ``0,2`` and ``heads`` to ``1-3``. Several edits are joined
with ``+`` (``pe_zero+head_ablate:layers=3``); the CLI's ``--intervention`` may also be given more than once.

Each parameter of a kind is a dataclass field whose metadata (:func:`param`) holds its reader and its rule in
words; the readers here raise ``ValueError`` with the rule, which the registry turns into one
:class:`~peanchor.core.errors.ConfigError` line naming the kind and the key.

Imports: nothing from peanchor but its errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field
from typing import Any

from peanchor.core.errors import ConfigError

__all__ = ["INDEX_RULE", "IndexSet", "choice", "flag", "grid_size", "index_set", "integer", "param", "split_edits", "split_spec"]

#: A set of indices in increasing order; None means every index there is.
IndexSet = tuple[int, ...] | None
#: How an index set is written, for the parameters' rules.
INDEX_RULE = "indices and ranges like 0-3,7, 'all' or 'none'"


def param(reader: Callable[[str], Any], rule: str, default: Any) -> Any:
    """A dataclass field that is a spec parameter: read from text by ``reader``, documented by ``rule``."""
    return field(default=default, metadata={"reader": reader, "rule": rule})


def split_edits(text: str) -> list[str]:
    """``"pe_zero+rope_planes:freqs=0-3"`` → ``["pe_zero", "rope_planes:freqs=0-3"]``."""
    parts = [p.strip() for p in text.split("+")]
    if not text.strip() or any(not p for p in parts):
        raise ConfigError(f"intervention spec {text!r}: expected KIND[:key=value,...], several joined with '+'")
    return parts


def split_spec(text: str) -> tuple[str, dict[str, str]]:
    """``"head_ablate:layers=0,2,heads=1"`` → ``("head_ablate", {"layers": "0,2", "heads": "1"})``."""
    kind, _, rest = text.partition(":")
    kind = kind.strip()
    values: dict[str, str] = {}
    last: str | None = None
    for piece in rest.split(",") if rest.strip() else []:
        key, eq, value = piece.partition("=")
        if not eq:
            if last is None:
                raise ConfigError(f"intervention spec {text!r}: {piece!r} is not key=value")
            values[last] += "," + piece.strip()
            continue
        last = key.strip()
        if last in values:
            raise ConfigError(f"intervention spec {text!r}: {last!r} is given twice")
        values[last] = value.strip()
    return kind, values


def index_set(text: str) -> IndexSet:
    """``"all"`` → None; ``"none"`` → ``()``; ``"0-3,7"`` → ``(0, 1, 2, 3, 7)``.

    >>> index_set("0-2,5"), index_set("all"), index_set("none")
    ((0, 1, 2, 5), None, ())
    """
    if text in ("all", ""):
        return None if text == "all" else ()
    if text == "none":
        return ()
    out: set[int] = set()
    for piece in text.split(","):
        low, dash, high = piece.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise ValueError("expected indices and ranges like 0-3,7, 'all' or 'none'")
        lo, hi = int(low), int(high) if dash else int(low)
        if hi < lo:
            raise ValueError(f"range {piece} runs backwards")
        out.update(range(lo, hi + 1))
    return tuple(sorted(out))


def integer(text: str) -> int:
    if not text.lstrip("-").isdigit():
        raise ValueError("expected an integer")
    return int(text)


def flag(text: str) -> bool:
    if text.lower() not in ("true", "false", "1", "0", "yes", "no"):
        raise ValueError("expected true or false")
    return text.lower() in ("true", "1", "yes")


def grid_size(text: str) -> tuple[int, int]:
    """``"7x9"`` → ``(7, 9)`` (rows × columns of patches); ``"7"`` → ``(7, 7)``.

    >>> grid_size("7x9"), grid_size("14")
    ((7, 9), (14, 14))
    """
    rows, x, cols = text.lower().partition("x")
    cols = cols if x else rows
    if not (rows.isdigit() and cols.isdigit()) or int(rows) < 1 or int(cols) < 1:
        raise ValueError("expected ROWSxCOLS of patches, e.g. 14x14")
    return int(rows), int(cols)


def choice(*options: str) -> Callable[[str], str]:
    """A reader accepting exactly one of ``options``."""

    def read(text: str) -> str:
        if text not in options:
            raise ValueError(f"expected one of {', '.join(options)}")
        return text

    return read


def show_index_set(value: IndexSet) -> str:
    """The text :func:`index_set` reads back (ranges collapsed).

    >>> show_index_set((0, 1, 2, 5)), show_index_set(None), show_index_set(())
    ('0-2,5', 'all', 'none')
    """
    if value is None:
        return "all"
    if not value:
        return "none"
    runs: list[list[int]] = []
    for i in value:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
