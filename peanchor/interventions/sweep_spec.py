"""The text of a dose-response sweep: one edit kind, its fixed parameters, and one parameter varied over doses.

``KIND:[key=value,...,]PARAM=DOSE,DOSE,...``: the **last** parameter given is the swept one, and its value is split
on every comma into doses, in the order given; the parameters before it are fixed at one value each::

    rope_planes:freqs=none,0-0,0-3,0-7,0-11          # five doses of freqs (axis=both, every layer and head)
    rope_planes:axis=x,freqs=0,1,2                   # axis fixed at x
    pe_resample:grid=7x7,14x14,21x21,28x28
    head_ablate:heads=0,layers=0..11                 # a numeric range A..B is every integer from A to B

A dose that is itself a set of several indices and ranges (what ``0-3,7`` is in an edit's spec) joins them with
``+`` instead of a comma: ``head_ablate:layers=0+2,1+3`` has the doses {0, 2} and {1, 3}. A fixed parameter's value
is written the same way (``layers=0+2``). Each dose is read by the kind's own parameter readers
(:func:`peanchor.interventions.registry.edit_from_spec`), so an unknown kind, an unknown key or a bad value is the
same one :class:`~peanchor.core.errors.ConfigError` line as in ``--intervention``, led by the sweep's text.

Imports: :mod:`peanchor.interventions` (edit, registry).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import Edit
from peanchor.interventions.registry import INTERVENTIONS, edit_from_spec

__all__ = ["SWEEP_FORM", "SweepSpec"]

#: How a sweep is written, for messages and help.
SWEEP_FORM = "KIND:[key=value,...,]PARAM=DOSE,DOSE,... (the last parameter is swept; A..B is a range)"
_RANGE = re.compile(r"^(-?\d+)\.\.(-?\d+)$")


@dataclass(frozen=True)
class SweepSpec:
    """A parsed sweep: ``kind``, the ``fixed`` parameters (key, value as an edit's spec writes it), the swept
    ``parameter`` and its ``doses`` (each as written, a union joined with ``+``; ranges ``A..B`` expanded).

    Examples:
        >>> s = SweepSpec.parse("head_ablate:heads=0,layers=0..2,5+7")
        >>> s.parameter, s.doses, s.text
        ('layers', ('0', '1', '2', '5+7'), 'head_ablate:heads=0,layers=0,1,2,5+7')
        >>> s.edits()[-1].spec
        'head_ablate:layers=5,7,heads=0,value=zero'
    """

    kind: str
    fixed: tuple[tuple[str, str], ...]
    parameter: str
    doses: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> SweepSpec:
        """The sweep ``text`` describes; a fault is one ConfigError line."""
        if not isinstance(text, str):
            raise ConfigError(f"sweep {text!r}: expected text, {SWEEP_FORM}")
        kind, _, rest = text.strip().partition(":")
        try:
            INTERVENTIONS.lookup(kind.strip())  # an unknown kind: one line with the valid ones
        except ConfigError as e:
            raise ConfigError(f"sweep {text!r}: {e}") from None
        values: list[tuple[str, list[str]]] = []
        for piece in rest.split(",") if rest.strip() else []:
            key, eq, value = piece.partition("=")
            if eq:
                if any(k == key.strip() for k, _ in values):
                    raise ConfigError(f"sweep {text!r}: {key.strip()!r} is given twice")
                values.append((key.strip(), [value.strip()]))
            elif values:
                values[-1][1].append(piece.strip())
            else:
                raise ConfigError(f"sweep {text!r}: {piece!r} is not key=value; expected {SWEEP_FORM}")
        if not values:
            raise ConfigError(f"sweep {text!r}: no parameter to sweep; expected {SWEEP_FORM}")
        *fixed, (parameter, pieces) = values
        for key, given in fixed:
            if len(given) > 1:
                raise ConfigError(f"sweep {text!r}: the fixed parameter {key}={','.join(given)} holds a comma (only "
                                  f"the last parameter is swept); write a set of indices with '+', e.g. "
                                  f"{key}={'+'.join(given)}")  # fmt: skip
        doses: list[str] = []
        for piece in pieces:
            for dose in _expand(piece, text):
                if dose in doses:
                    raise ConfigError(f"sweep {text!r}: the dose {parameter}={dose} is given twice")
                doses.append(dose)
        sweep = cls(kind.strip(), tuple((k, v[0]) for k, v in fixed), parameter, tuple(doses))
        sweep.edits()  # every dose read (and checked) now
        return sweep

    @property
    def text(self) -> str:
        """The sweep written back (ranges expanded): what the analysis plan and the result files hold."""
        fixed = "".join(f"{k}={v}," for k, v in self.fixed)
        return f"{self.kind}:{fixed}{self.parameter}={','.join(self.doses)}"

    def dose_spec(self, dose: str) -> str:
        """The edit spec of one dose (a ``+`` union written with commas, as an edit's spec reads it)."""
        parts = [f"{k}={v.replace('+', ',')}" for k, v in self.fixed] + [f"{self.parameter}={dose.replace('+', ',')}"]
        return f"{self.kind}:{','.join(parts)}"

    def edits(self) -> list[Edit]:
        """The edit of every dose, in order."""
        out = []
        for dose in self.doses:
            try:
                out.append(edit_from_spec(self.dose_spec(dose)))
            except ConfigError as e:
                raise ConfigError(f"sweep {self.text!r}: {e}") from None
        return out


def _expand(piece: str, text: str) -> list[str]:
    """One comma piece of the swept value: a range ``A..B`` as its integers, anything else as itself."""
    if not piece:
        raise ConfigError(f"sweep {text!r}: an empty dose (two commas in a row, or one at the end)")
    match = _RANGE.match(piece)
    if match is None:
        return [piece]
    low, high = int(match[1]), int(match[2])
    if high < low:
        raise ConfigError(f"sweep {text!r}: the range {piece} runs backwards")
    return [str(i) for i in range(low, high + 1)]
