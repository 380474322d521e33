"""Errors that are the user's to fix.

The CLI turns every :class:`PeanchorError` into one line on stderr and a non-zero exit; anything
else is a bug and keeps its traceback. Raise these with a message that names the path, key or
value at fault and says what was expected.

Imports: nothing.
"""

from __future__ import annotations

from collections.abc import Iterable


def did_you_mean(value: object, choices: Iterable[str]) -> str:
    """`` (did you mean rope?)`` for the valid choice closest to ``value``, or ``""`` when none is close; for the
    end of an error message that lists the valid ones.

    >>> did_you_mean("rop", ["none", "ape", "rope", "rope_mixed"]), did_you_mean("xyz", ["ape"])
    (' (did you mean rope?)', '')
    """
    import difflib

    close = difflib.get_close_matches(str(value), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


class PeanchorError(Exception):
    """A problem with the user's input, data or environment (not a bug in peanchor)."""

    exit_code: int = 2


class ConfigError(PeanchorError):
    """An unknown key, a wrong type or a conflicting setting."""


class DataError(PeanchorError):
    """A dataset that is missing, empty or unreadable."""


class CheckpointError(PeanchorError):
    """A checkpoint or run directory that is missing, truncated or of a foreign layout."""


class RunDirError(PeanchorError):
    """A run directory that is locked by another process or holds a different config."""


class TrainingDiverged(PeanchorError):
    """The loss became NaN or infinite."""

    exit_code = 3


class SchemaError(DataError):
    """A result file (analysis.json, results.json) of another schema version, of another tool, or damaged."""
