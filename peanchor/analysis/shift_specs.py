"""Shifts chosen on the command line: ``--shift KIND:key=value[,key=value]`` (repeatable, on ``analyze`` and
``reproduce``), and the one rule that turns a model's preset plus those specs into the shifts it is measured under.

::

    --shift jpeg:quality=10                   JPEG at quality 10
    --shift blur:sigma=1.5,kernel_size=9      Gaussian blur, σ 1.5, 9×9 kernel (without kernel_size: the skimage rule)
    --shift gaussian_noise:sigma=0.08,seed=1  additive noise on the [0, 1] scale (seed 0 by default)
    --shift contrast:factor=0.3               ImageNet-C contrast
    --shift pixelate:factor=0.5               ImageNet-C pixelate
    --shift defocus_blur:radius=3             ImageNet-C defocus blur (alias_blur 0.1 by default)
    --shift jpeg:severity=4                   the severity-4 value of the table for the model's resolution

Which shifts a model is measured under (:func:`measured_shifts`): its preset's, set for the preset's resolution
(handed in by the caller, which looks the preset up: nothing here knows presets), or without one the resolution rule
(:func:`peanchor.analysis.shifts.paper_shifts`); then each ``--shift`` replaces the shift of its kind or, for a
kind not there yet, is added. A shift is recorded in the result files under its kind's name with every parameter it
ran with (a blur's kernel included), and where it came from (``shift_sources``).

The kinds, their parameters and their tables are the registry's (:mod:`peanchor.analysis.shifts.registry`).

Imports: :mod:`peanchor.analysis.shifts`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from peanchor.analysis.shifts import (
    Shift,
    get_kind,
    paper_shifts,
    paper_shifts_source,
    severity_shift,
    table_name,
)
from peanchor.analysis.shifts.registry import KINDS, kinds_line
from peanchor.core.errors import ConfigError

__all__ = ["GivenShift", "ShiftSpec", "given_shift_specs", "measured_shifts", "parse_shift_spec", "parse_shift_specs", "with_shift_specs"]

SEVERITIES = range(1, 6)


@dataclass(frozen=True)
class ShiftSpec:
    """One parsed ``--shift``: a kind with either its parameters or a severity of its table."""

    text: str
    kind: str
    params: tuple[tuple[str, int | float], ...] = ()
    severity: int | None = None

    def shift(self, img_size: int) -> Shift:
        """The :class:`Shift` this spec means for ``img_size`` px images (every default resolved)."""
        values = dict(self.params)
        try:
            if self.severity is not None:
                return severity_shift(self.kind, self.severity, img_size, **values)
            return Shift(self.kind, **values).resolved(img_size)
        except ConfigError as e:
            raise ConfigError(f"--shift {self.text!r}: {e}") from None

    def source(self, img_size: int) -> str:
        """Where the shift came from, as the result files record it."""
        if self.severity is None:
            return f"--shift {self.text}"
        return f"--shift {self.text} ({table_name(img_size)} severity {self.severity})"


def _number(spec: str, kind: str, key: str, raw: str) -> int | float:
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if key == "severity" or any(p.name == key and p.kind is int for p in KINDS[kind].params):
        if not (math.isfinite(value) and value == int(value)) or "." in raw or "e" in raw.lower():
            raise ConfigError(f"--shift {spec!r}: {key}={raw!r} is not an integer")
        return int(value)
    if not math.isfinite(value):
        raise ConfigError(f"--shift {spec!r}: {key}={raw!r} is not a finite number")
    return value


def parse_shift_spec(text: str) -> ShiftSpec:
    """``"blur:sigma=1.5,kernel_size=9"`` → a checked :class:`ShiftSpec` (values are checked as a 32 px shift; the
    resolution-dependent checks run again in :meth:`ShiftSpec.shift`).

    >>> parse_shift_spec("blur:sigma=1.5,kernel_size=9").shift(32).describe()
    {'kind': 'blur', 'kernel_size': 9, 'sigma': 1.5}
    >>> parse_shift_spec("jpeg:severity=4").shift(32).describe(), parse_shift_spec("jpeg:severity=4").shift(224).quality
    ({'kind': 'jpeg', 'quality': 50}, 10)
    """
    spec = text.strip()
    kind, sep, rest = spec.partition(":")
    kind = kind.strip().lower()
    if not sep or not kind:
        raise ConfigError(f"--shift {text!r}: expected KIND:key=value[,key=value], e.g. jpeg:quality=10 or "
                          "blur:sigma=1.5,kernel_size=9")  # fmt: skip
    if kind not in KINDS:
        raise ConfigError(f"--shift {text!r}: unknown shift kind {kind!r}; valid: {kinds_line()}")
    plugin = get_kind(kind)
    allowed = (*plugin.param_names, "severity")
    values: dict[str, int | float] = {}
    for item in (i for i in rest.split(",") if i.strip()):
        key, eq, raw = (part.strip() for part in item.partition("="))
        if not eq or not key or not raw:
            raise ConfigError(f"--shift {text!r}: {item.strip()!r} is not key=value")
        if key not in allowed:
            raise ConfigError(f"--shift {text!r}: {kind} takes {', '.join(allowed[:-1])} or severity=1..5; "
                              f"got {key!r}")  # fmt: skip
        if key in values:
            raise ConfigError(f"--shift {text!r}: {key} is given twice")
        values[key] = _number(text, kind, key, raw)
    severity = values.pop("severity", None)
    if severity is not None:
        if severity not in SEVERITIES:
            raise ConfigError(f"--shift {text!r}: severity must be an integer in 1..5, got {severity}")
        extra = [p.name for p in plugin.params if p.name in values and not p.with_severity]
        if extra:
            raise ConfigError(f"--shift {text!r}: severity={severity} takes {kind}'s parameters from the table; "
                              f"give either severity or {', '.join(extra)}")  # fmt: skip
    else:
        if plugin.main not in values:
            raise ConfigError(f"--shift {text!r}: {kind} needs {plugin.main}=... (or severity=1..5); it takes "
                              f"{', '.join(plugin.param_names)}")  # fmt: skip
    parsed = ShiftSpec(spec, kind, tuple(values.items()), int(severity) if severity is not None else None)
    parsed.shift(32)  # the value checks (quality 1..100, σ > 0, ...) now, not after a training run
    return parsed


def parse_shift_specs(texts: Iterable[str]) -> list[ShiftSpec]:
    """Every ``--shift`` of one command; one per kind (each is recorded under its kind's name).

    >>> [s.kind for s in parse_shift_specs(["jpeg:quality=10", "contrast:factor=0.3"])]
    ['jpeg', 'contrast']
    """
    specs: list[ShiftSpec] = []
    for text in texts:
        spec = parse_shift_spec(text)
        earlier = next((s for s in specs if s.kind == spec.kind), None)
        if earlier is not None:
            raise ConfigError(f"--shift {text!r}: {spec.kind} is already given ({earlier.text!r}); one shift per kind "
                              "(use --severities for the whole severity sweep)")  # fmt: skip
        specs.append(spec)
    return specs


def measured_shifts(
    img_size: int, specs: Sequence[ShiftSpec] = (), preset: tuple[str, Mapping[str, Mapping[str, Any]]] | None = None
) -> tuple[dict[str, Shift], dict[str, str]]:
    """The shifts a model at ``img_size`` px is measured under, and where each one comes from: ``preset``'s (its
    name and shift descriptions at this resolution, :func:`peanchor.presets.catalog.preset_shifts`; the caller looks the
    preset up), else the resolution rule; then each of ``specs``.

    >>> cpu = ("cpu", {"jpeg": {"kind": "jpeg", "quality": 10}, "blur": {"kind": "blur", "sigma": 1.0}})
    >>> shifts, sources = measured_shifts(32, parse_shift_specs(["jpeg:quality=10", "contrast:factor=0.3"]), cpu)
    >>> {k: s.describe() for k, s in shifts.items()}["jpeg"], list(shifts), sources["contrast"], sources["blur"]
    ({'kind': 'jpeg', 'quality': 10}, ['jpeg', 'blur', 'contrast'], '--shift contrast:factor=0.3', 'preset cpu')
    >>> measured_shifts(224)[1]["jpeg"]
    'resolution rule (paper)'
    """
    if preset is not None:
        name, described = preset
        base = {key: Shift.from_dict(dict(spec)) for key, spec in described.items()}
        origin = f"preset {name}"
    else:
        base, origin = paper_shifts(img_size), f"resolution rule ({paper_shifts_source(img_size)})"
    return with_shift_specs(img_size, base, dict.fromkeys(base, origin), specs)


def with_shift_specs(
    img_size: int, shifts: Mapping[str, Shift], sources: Mapping[str, str], specs: Sequence[ShiftSpec] = ()
) -> tuple[dict[str, Shift], dict[str, str]]:
    """``shifts`` (with their ``sources``, where known) resolved for ``img_size`` px, then each of ``specs``
    replacing the shift(s) of its kind, in the place of the first one and under the kind's name, or, for a kind
    not measured yet, added last.

    >>> jpeg = {"jpeg": Shift("jpeg", quality=10)}
    >>> shifts, sources = with_shift_specs(32, jpeg, {}, parse_shift_specs(["blur:sigma=1", "jpeg:quality=30"]))
    >>> [s.name for s in shifts.values()], sources["jpeg"], "blur" in sources
    (['jpeg_q30', 'blur_k9_s1'], '--shift jpeg:quality=30', True)
    """
    measured = {name: (shift.resolved(img_size), sources.get(name)) for name, shift in shifts.items()}
    for spec in specs:
        own = [name for name, (shift, _) in measured.items() if shift.kind == spec.kind] or [None]
        entry = (spec.shift(img_size), spec.source(img_size))
        rebuilt = {}
        for name, value in measured.items():
            if name == own[0]:
                rebuilt[spec.kind] = entry
            elif name not in own:
                rebuilt[name] = value
        measured = rebuilt if own[0] is not None else {**measured, spec.kind: entry}
    return ({name: shift for name, (shift, _) in measured.items()},
            {name: src for name, (_, src) in measured.items() if src is not None})  # fmt: skip


@dataclass(frozen=True)
class GivenShift:
    """A :class:`Shift` object given to the plan (``peanchor.analyze(shifts=[Shift(...)])``): it reaches the plan
    as itself, resolved for the model's resolution, where a ``--shift`` text is parsed (it reads as a
    :class:`ShiftSpec` does)."""

    given: Shift

    @property
    def kind(self) -> str:
        return self.given.kind

    def shift(self, img_size: int) -> Shift:
        return self.given.resolved(img_size)

    def source(self, img_size: int) -> str:
        return "given as a Shift"


def given_shift_specs(items: Sequence[ShiftSpec | Shift | str]) -> list[Any]:
    """``--shift`` texts parsed (once), specs and :class:`Shift` objects kept, in the given order; one per kind."""
    if isinstance(items, (str, Shift)):
        items = [items]
    texts = [item for item in items if isinstance(item, str)]
    parsed = iter(parse_shift_specs(texts))
    out: list[Any] = []
    for item in items:
        if isinstance(item, str):
            out.append(next(parsed))
        elif isinstance(item, Shift):
            out.append(GivenShift(item))
        elif isinstance(item, ShiftSpec):
            out.append(item)
        else:
            raise ConfigError(f"shift {item!r}: expected a Shift or a string such as 'jpeg:quality=10'")
    kinds = [spec.kind for spec in out]
    twice = next((kind for kind in kinds if kinds.count(kind) > 1), None)
    if twice is not None:
        raise ConfigError(f"two shifts of kind {twice}: one shift per kind (severities=True sweeps its severities)")
    return out
