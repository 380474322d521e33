"""The analysis plan: every setting of one model's analysis in one typed, checked value.

An :class:`AnalysisPlan` says what :func:`peanchor.analysis.evaluate.evaluate_model` measures and how: the shifts
(already :class:`Shift` values resolved for the model's resolution, with where each came from) and the settings,
the fields of its base :class:`~peanchor.settings.plan.PlanSettings`, declared there once with their help and
flags (``peanchor.analyze``'s keywords, ``peanchor analyze``'s flags and the file record are made from them):
the α grid, the RPI draws, the seed, the batch size, the image subset, the severity sweeps, the SSDC variant, the
bootstrap, the position probe's settings, the lenses and each lens's options (``lens_options``: lens → option → value, set with
``--set analysis.lenses.<lens>.<option>=...``; the SSDC and probe options keep their older plan fields, which the
result files record). It is resolved once, by :func:`resolve_plan`, in three layers, the later
one winning::

    defaults (a preset's analysis defaults, or a base plan)  ←  given (command-line flags, Python kwargs)
        ←  --set analysis.KEY=VALUE

and then handed down: nothing under it looks a preset up. Its checks live in :meth:`AnalysisPlan.__post_init__`
and nowhere else, each failure one :class:`ConfigError` line naming the plan key. Two plans are equal when they
measure the same thing (``shift_sources`` is a record, not a setting), which is the whole of ``reproduce``'s reuse
test (:func:`peanchor.study.pipeline.reusable`). ``analysis.json`` records the plan's settings
(:meth:`AnalysisPlan.settings_record`, :class:`peanchor.results.records.AnalysisSettings`) beside its ``shifts`` and
``shift_sources``, and :meth:`AnalysisPlan.from_result` reads it back; ``OUT/reproduce.json`` records
:meth:`AnalysisPlan.to_dict`.

Imports: :mod:`peanchor.analysis` (shifts, shift_specs), :mod:`peanchor.lenses` (their names and options),
:mod:`peanchor.settings.plan` (the settings' fields),
:mod:`peanchor.interventions` (the edit and sweep specs, lazily),
:mod:`peanchor.results.records` (the file record), :mod:`peanchor.settings.set_items` (the ``--set`` items, read once); pydantic
(checking a plug-in lens's options) when a plan has some.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

from peanchor.analysis.shift_specs import ShiftSpec, given_shift_specs, measured_shifts, with_shift_specs
from peanchor.analysis.shifts import Shift
from peanchor.core.errors import ConfigError, did_you_mean
from peanchor.lenses import LENS_NAMES, get_lens, lens_names
from peanchor.lenses.base import PLAN_KEY
from peanchor.settings.plan import DEFAULT_ALPHAS, Metric, PlanSettings, RPIMode, SSDCMode
from peanchor.results.records import AnalysisResult, AnalysisSettings
from peanchor.settings.set_items import PLAN_PREFIX, SetItem, parse_set_items, split_plan_items

__all__ = [
    "DEFAULT_ALPHAS", "LENS_NAMES", "SETTINGS_KEYS", "AnalysisPlan", "Metric", "SSDCMode", "parse_plan_items", "resolve_plan",
    "split_plan_items",
]  # fmt: skip

# LENS_NAMES (from peanchor.lenses, a live view): a plan measures every registered lens unless told otherwise,
# and SSDC always (ΔSSDC and the α sweep are made of it).
#: The lenses of an analysis.json written before the plan recorded its lenses: the three there were then.
LEGACY_LENSES: tuple[str, ...] = ("ssdc", "position_probe", "attention_distance")
SET_PREFIX = PLAN_PREFIX


def _fail(key: str, value: Any, expected: str) -> ConfigError:
    shown = list(value) if isinstance(value, tuple) else value
    return ConfigError(f"{SET_PREFIX}{key}={shown!r}: {expected}")


def _closest(name: str, names: Iterable[str], prefix: str) -> str:
    """`` (did you mean analysis.rpi_draws?)``: the closest of ``names`` to ``name`` (compared without the shared
    ``prefix``, which would make every key close), shown with it; ``""`` when none is close."""
    hint = did_you_mean(name, [n for n in names if n != "lens_options"])
    return hint.replace("(did you mean ", f"(did you mean {prefix}", 1)


def _listed(key: str, given: Any, single: Callable[[Any], bool], ok: Callable[[Any], bool], shape: str,
            rule: str) -> list[Any]:  # fmt: skip
    """``given`` as a list (a ``single`` value: a list of one), each value passing ``ok``; one line naming ``key``
    when it is not a list (``expected {shape}``) or a value is not ``ok`` (``expected {rule}``)."""
    values = [given] if single(given) else given
    if isinstance(values, (str, bytes, Mapping)) or not isinstance(values, Iterable):
        raise _fail(key, given, f"expected {shape}")
    values = list(values)
    if not all(ok(v) for v in values):
        raise _fail(key, given, f"expected {rule}")
    return values


def _is_int(value: Any) -> bool:  # numpy's integers too; a bool is not a number
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class AnalysisPlan(PlanSettings):
    """How one model is analysed. Build one with :func:`resolve_plan` (the layers), or directly for a script;
    either way the values are checked here.

    Examples:
        >>> from peanchor.analysis.shifts import Shift
        >>> plan = AnalysisPlan({"jpeg": Shift("jpeg", quality=10)}, alphas=[1, 0.5, 1], rpi_draws=2)
        >>> plan.alphas, plan.for_model(scalable=False).alphas, AnalysisPlan.from_dict(plan.to_dict()) == plan
        ((1.0, 0.5), (), True)
        >>> AnalysisPlan({"jpeg": Shift("jpeg", quality=10)}, rpi_draws=0)
        Traceback (most recent call last):
        peanchor.core.errors.ConfigError: analysis.rpi_draws=0: expected an integer >= 1
    """

    shifts: Mapping[str, Shift]  # name → the resolved shift, in measuring order
    shift_sources: Mapping[str, str] = field(default_factory=dict, compare=False)  # name → "preset cpu", "--shift ..."
    # the settings (alphas, rpi_draws, ..., lens_options) are PlanSettings' fields: peanchor/settings/plan.py

    def __post_init__(self) -> None:
        def store(name: str, value: Any) -> None:
            object.__setattr__(self, name, value)

        own_options, aliased = split_lens_options(self.lens_options)
        for key, value in aliased.items():
            store(key, value)

        if not isinstance(self.shifts, Mapping) or not self.shifts:
            raise _fail("shifts", self.shifts, "expected at least one shift (accuracy under a shift is part of every "
                        "analysis)")  # fmt: skip
        for name, shift in self.shifts.items():
            if not isinstance(name, str) or not isinstance(shift, Shift):
                raise _fail("shifts", {name: shift}, "expected a name and a Shift for every shift")
        store("shifts", dict(self.shifts))
        if not isinstance(self.shift_sources, Mapping) or not set(self.shift_sources) <= set(self.shifts):
            raise _fail("shift_sources", self.shift_sources, f"expected a source for some of {', '.join(self.shifts)}")
        store("shift_sources", {str(k): str(v) for k, v in self.shift_sources.items()})
        store("alphas", self._alphas(self.alphas))
        for key, low in (("rpi_draws", 1), ("seed", None), ("batch_size", 1), ("bootstrap", 0),
                         ("bootstrap_groups", 1)):
            value = getattr(self, key)
            if not _is_int(value) or (low is not None and value < low):
                raise _fail(key, value, "expected an integer" + (f" >= {low}" if low is not None else ""))
            store(key, int(value))
        if self.max_images is not None:
            if not (_is_int(self.max_images) and self.max_images >= 1):
                raise _fail("max_images", self.max_images, "expected an integer >= 1, or null for every image")
            store("max_images", int(self.max_images))
        if not isinstance(self.severities, bool):
            raise _fail("severities", self.severities, "expected true or false")
        for key, kind in (("ssdc_mode", SSDCMode), ("metric", Metric), ("rpi_mode", RPIMode)):
            if getattr(self, key) not in get_args(kind):
                raise _fail(key, getattr(self, key), f"expected one of {', '.join(get_args(kind))}")
        if not (_is_number(self.probe_ridge) and self.probe_ridge > 0):
            raise _fail("probe_ridge", self.probe_ridge, "expected a finite number > 0")
        if not (_is_number(self.probe_holdout) and 0 < self.probe_holdout < 1):
            raise _fail("probe_holdout", self.probe_holdout, "expected a fraction strictly between 0 and 1")
        store("probe_ridge", float(self.probe_ridge))
        store("probe_holdout", float(self.probe_holdout))
        store("lenses", self._lenses(self.lenses))
        store("interventions", self._interventions(self.interventions))
        store("lens_options", self._lens_options(own_options, self.lenses))  # and the typed ones, for options()
        store("sweeps", self._sweeps(self.sweeps))
        store("resolutions", self._resolutions(self.resolutions))

    @staticmethod
    def _interventions(given: Any) -> tuple[Any, ...]:
        """The edits as objects (:class:`~peanchor.interventions.Edit`, a ``Hook`` too), each spec text parsed once
        here and each object kept as it is; a bad spec is one line naming the plan key."""
        items = [given] if isinstance(given, str) or not isinstance(given, Iterable) else given
        if isinstance(items, (bytes, Mapping)):
            raise _fail("interventions", given, "expected a list of edits, e.g. [pe_zero, 'head_ablate:layers=3']")
        items = list(items)
        if not items:
            return ()  # nothing to read: the edits' package (torch) stays unloaded
        from peanchor.interventions import Edit, Intervention

        edits: list[Any] = []
        for item in items:
            if isinstance(item, Edit):
                edits.append(item)
            elif isinstance(item, str):
                try:
                    edits += Intervention.parse(item).edits
                except ConfigError as e:
                    raise ConfigError(f"{SET_PREFIX}interventions: {e}") from None
            else:
                raise _fail("interventions", given, "expected Edit objects (e.g. Hook(point, fn)) or edit specs as "
                            "text (KIND:key=value,...)")  # fmt: skip
        return tuple(edits)

    @staticmethod
    def _sweeps(specs: Any) -> tuple[str, ...]:
        """Each sweep written back by :class:`~peanchor.interventions.SweepSpec` (ranges expanded), each once."""
        from peanchor.interventions import SweepSpec

        texts = [specs] if isinstance(specs, str) else specs
        if isinstance(texts, (bytes, Mapping)) or not isinstance(texts, Iterable) or any(
                not isinstance(t, str) for t in texts):  # fmt: skip
            raise _fail("sweeps", specs, "expected a list of sweep specs, e.g. ['rope_planes:freqs=none,0-3,0-7']")
        try:
            return tuple(dict.fromkeys(SweepSpec.parse(t).text for t in texts))
        except ConfigError as e:
            raise ConfigError(f"{SET_PREFIX}sweeps: {e}") from None

    @staticmethod
    def _resolutions(sizes: Any) -> tuple[int, ...]:
        """Image sizes in px, integers >= 1, each once, ascending (whether the patch divides them is checked against
        the model, :mod:`peanchor.analysis.resolution`)."""
        values = _listed("resolutions", sizes, _is_int, lambda v: _is_int(v) and v >= 1,
                         "a list of image sizes in px, e.g. [16, 24, 40, 48]", "image sizes in px, integers >= 1")
        return tuple(sorted({int(v) for v in values}))

    @staticmethod
    def _alphas(alphas: Any) -> tuple[float, ...]:
        """Finite numbers >= 0, as floats, each once, in the given order (a single number is a one-point grid)."""
        values = _listed("alphas", alphas, _is_number, lambda a: _is_number(a) and a >= 0,
                         "a list of numbers >= 0, e.g. [1, 0.5, 0]",
                         "finite numbers >= 0 (1 = the PE as trained, 0 = none)")
        return tuple(dict.fromkeys(float(a) for a in values))

    @staticmethod
    def _lenses(lenses: Any) -> tuple[str, ...]:
        """Registered lens names (None: all of them, including lenses registered after this module was imported),
        "ssdc" among them, each once, in the registry's order."""
        registered = lens_names()
        if lenses is None:
            return registered
        if isinstance(lenses, (str, bytes, Mapping)) or not isinstance(lenses, Iterable):
            raise _fail("lenses", lenses, f"expected a list of lens names ({', '.join(registered)})")
        chosen = list(lenses)
        unknown = [name for name in chosen if name not in registered]
        if unknown:
            raise _fail("lenses", chosen, f"unknown lens {unknown[0]!r}; valid: {', '.join(registered)}")
        missing = [name for name in registered if get_lens(name).required and name not in chosen]
        if missing:
            raise _fail("lenses", chosen, f"{missing[0]!r} is always measured (ΔSSDC and the α sweep are made of "
                        "it); list it too")  # fmt: skip
        return tuple(name for name in registered if name in chosen)

    def _lens_options(self, given: Mapping[str, Mapping[str, Any]], measured: tuple[str, ...]) -> dict[str, dict[str, Any]]:
        """Every option of every measured lens that has options of its own, checked against its dataclass (the
        given value or its default), as the files record them; the typed options pydantic made are kept
        (:meth:`options` hands them to the lenses as they are). The plan fields' options are not repeated here."""
        for name in given:
            if name not in measured:
                raise _fail(f"lenses.{name}", dict(given[name]), f"lens {name!r} is not measured; measured: "
                            f"{', '.join(measured)}")  # fmt: skip
        out: dict[str, dict[str, Any]] = {}
        typed: dict[str, Any] = {}
        for name in measured:
            options_type = get_lens(name).options_type
            own = [f for f in dataclasses.fields(options_type) if PLAN_KEY not in f.metadata]
            if own:
                typed[name] = _checked_options(name, options_type, dict(given.get(name, {})))
                out[name] = {f.name: getattr(typed[name], f.name) for f in own}
        object.__setattr__(self, "_typed_options", typed)  # not a field: derived from lens_options, never compared
        return out

    def options(self, lens: str) -> Any:
        """The typed options of ``lens`` (an instance of its ``options_type``), as this plan sets them: the instance
        checked when the plan was made, with the options that are plan fields (``ssdc.mode``: ``ssdc_mode``) read
        from those fields."""
        options_type = get_lens(lens).options_type
        keyed = {f.name: getattr(self, f.metadata[PLAN_KEY]) for f in dataclasses.fields(options_type)
                 if PLAN_KEY in f.metadata}  # fmt: skip
        typed = self._typed_options.get(lens)  # type: ignore[attr-defined]
        if typed is None:
            return options_type(**keyed)
        return dataclasses.replace(typed, **keyed) if keyed else typed

    def lens_options_typed(self) -> dict[str, Any]:
        """Every registered lens's typed options under this plan (what :func:`~peanchor.analysis.evaluate.evaluate_model`
        hands each lens)."""
        return {name: self.options(name) for name in lens_names()}

    def __hash__(self) -> int:
        return hash((frozenset(self.shifts.items()), json.dumps(self.records(), sort_keys=True)))

    # ---- the plan for one model ------------------------------------------------------------------
    def for_model(self, scalable: bool) -> AnalysisPlan:
        """The plan as applied to a model: no α sweep when α means nothing for its PE (``scalable`` False)."""
        return self if scalable or not self.alphas else dataclasses.replace(self, alphas=())

    def settings(self) -> dict[str, Any]:
        """Every setting but the shifts, by plan key (the values :func:`resolve_plan` takes as ``defaults``)."""
        values = {key: getattr(self, key) for key in SETTINGS_KEYS}
        values["lens_options"] = {name: dict(options) for name, options in self.lens_options.items()}
        return values

    # ---- records ---------------------------------------------------------------------------------
    def records(self) -> dict[str, Any]:
        """:meth:`settings` as the files write them: the edits as their spec text (a ``Hook`` names its function by
        ``MODULE:NAME``; every spec reads back), tuples as lists."""
        values = self.settings()
        values["interventions"] = tuple(edit.spec for edit in self.interventions)
        return {key: list(v) if isinstance(v, tuple) else v for key, v in values.items()}

    def to_dict(self) -> dict[str, Any]:
        """The JSON form (``OUT/reproduce.json``'s ``"analysis"``): shifts as their descriptions, tuples as lists;
        :meth:`from_dict` reads it back exactly."""
        values = self.records()
        for key in ("lens_options", "sweeps", "resolutions"):  # as analysis.json: absent when no lens has options, without sweeps or other resolutions
            if not values[key]:
                del values[key]
        return {"shifts": {name: shift.describe() for name, shift in self.shifts.items()},
                "shift_sources": dict(self.shift_sources), **values}  # fmt: skip

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> AnalysisPlan:
        """The plan :meth:`to_dict` wrote; an unknown key or a bad value is one :class:`ConfigError` line."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("shifts"), Mapping):
            raise ConfigError(f"an analysis plan needs its 'shifts' (name → description), got {doc!r}")
        unknown = sorted(set(doc) - {"shifts", "shift_sources", *SETTINGS_KEYS})
        if unknown:
            raise ConfigError(f"unknown analysis plan key {unknown[0]!r}; valid: shifts, shift_sources, "
                              f"{', '.join(SETTINGS_KEYS)}")  # fmt: skip
        shifts = {name: Shift.from_dict(dict(spec)) for name, spec in doc["shifts"].items()}
        settings = {key: value for key, value in doc.items() if key in SETTINGS_KEYS}
        return cls(shifts, dict(doc.get("shift_sources") or {}), **settings)

    def settings_record(self, evalset: str, device: str) -> AnalysisSettings:
        """What ``analysis.json`` records of the plan (its shifts go to the result's ``shifts`` and
        ``shift_sources``), with the evaluation set's fingerprint and the device it ran on."""
        values = self.records()
        values["lens_options"] = values["lens_options"] or None  # absent from the file when no lens has options
        values["sweeps"] = values["sweeps"] or None  # and without dose-response sweeps
        values["resolutions"] = values["resolutions"] or None  # and without other resolutions
        return AnalysisSettings(**values, evalset=evalset, device=device)

    @classmethod
    def from_result(cls, result: AnalysisResult) -> AnalysisPlan:
        """The plan an ``analysis.json`` was made with (its ``settings``, ``shifts`` and ``shift_sources``). A file
        written before the plan recorded them has no ``lenses`` (then: the three of that time) and keeps ``max_images`` in its
        ``source`` (reproduce's)."""
        s = result.settings
        settings = {key: getattr(s, key) for key in SETTINGS_KEYS}
        if s.lenses is None:
            settings["lenses"] = LEGACY_LENSES
        if s.interventions is None:  # written before the plan recorded its edits: there were none
            settings["interventions"] = ()
        if s.sweeps is None:  # no dose-response sweeps (or written before they existed)
            settings["sweeps"] = ()
        if s.resolutions is None:  # no other resolutions (or written before the setting existed)
            settings["resolutions"] = ()
        if s.max_images is None:
            settings["max_images"] = result.source.get("max_images")
        if s.rpi_mode is None:  # written before the setting existed: one permutation per forward call
            settings["rpi_mode"] = "per_call"
        if s.bootstrap_groups is None:  # written before the groups bootstrap: its default (no interval used it)
            settings["bootstrap_groups"] = PlanSettings.bootstrap_groups
        shifts = {name: Shift.from_dict(dict(spec)) for name, spec in result.shifts.items()}
        return cls(shifts, dict(result.shift_sources or {}), **settings)


#: The plan's settings: every field but the shifts (:class:`~peanchor.settings.plan.PlanSettings`' fields;
#: ``AnalysisSettings`` records these).
SETTINGS_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(PlanSettings))


def split_lens_options(lens_options: Any) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """``lens → option → value`` → (the options of the lenses' own, the plan fields that the other options are:
    ``{"ssdc": {"mode": "per_image"}}`` sets ``ssdc_mode``). Unknown lenses and options are one line each.

    >>> split_lens_options({"ssdc": {"mode": "per_image"}, "position_probe": {"ridge": 0.1}})
    ({}, {'ssdc_mode': 'per_image', 'probe_ridge': 0.1})
    """
    if lens_options is None:
        return {}, {}
    if not isinstance(lens_options, Mapping):
        raise _fail("lens_options", lens_options, "expected a mapping lens → {option: value}")
    own: dict[str, dict[str, Any]] = {}
    aliased: dict[str, Any] = {}
    for name, options in lens_options.items():
        options_type = get_lens(name).options_type
        if dataclasses.is_dataclass(options) and not isinstance(options, type):
            options = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        fields = {f.name: f for f in dataclasses.fields(options_type)}
        if not isinstance(options, Mapping):
            raise _fail(f"lenses.{name}", options, f"expected a mapping of its options ({', '.join(fields)})")
        for option, value in options.items():
            if option not in fields:
                valid = ", ".join(f"{SET_PREFIX}lenses.{name}.{f}" for f in fields) or "none: it has no options"
                raise ConfigError(f"unknown option {SET_PREFIX}lenses.{name}.{option}; valid: {valid}"
                                  + _closest(option, fields, f"{SET_PREFIX}lenses.{name}."))  # fmt: skip
            key = fields[option].metadata.get(PLAN_KEY)
            if key is not None:
                aliased[key] = value
            else:
                own.setdefault(name, {})[option] = value
    return own, aliased


def _checked_options(lens: str, options_type: type, values: dict[str, Any]) -> Any:
    """``values`` (option → value) checked by pydantic against ``options_type`` in strict JSON mode (as ``train
    --set`` is), with the defaults filled in: the typed options; the first error is one line."""
    if not values:
        return options_type()
    from pydantic import TypeAdapter, ValidationError

    try:
        return TypeAdapter(options_type).validate_json(json.dumps(values), strict=True)
    except (ValidationError, TypeError) as e:
        if isinstance(e, TypeError):  # a value JSON cannot hold
            raise _fail(f"lenses.{lens}", values, "expected JSON values (numbers, strings, lists)") from None
        first = e.errors()[0]
        option = ".".join(str(part) for part in first["loc"]) or "?"
        raise _fail(f"lenses.{lens}.{option}", values.get(option, first.get("input")),
                    first["msg"][0].lower() + first["msg"][1:]) from None  # fmt: skip


def parse_plan_items(items: Iterable[str | SetItem]) -> dict[str, Any]:
    """``--set analysis.KEY=VALUE`` items (read already by the command, :mod:`peanchor.settings.set_items`, or text) → plan
    key → value (the checks are :class:`AnalysisPlan`'s). The shifts are ``--shift``'s.

    >>> parse_plan_items(["analysis.rpi_draws=2", "analysis.alphas=[1, 0.5]", "analysis.max_images=null"])
    {'rpi_draws': 2, 'alphas': [1, 0.5], 'max_images': None}
    """
    values: dict[str, Any] = {}
    for item in parse_set_items(items):
        key, value = item.key, item.value
        name = key.removeprefix(SET_PREFIX)
        lens, _, option = name.removeprefix("lenses.").partition(".")
        if name.startswith("lenses.") and lens and option and "." not in option:
            get_lens(lens)  # an unknown lens is one line listing the registered ones
            try:
                own, aliased = split_lens_options({lens: {option: value}})
            except ConfigError as e:
                raise ConfigError(f"--set {item.text!r}: {e}") from None
            values.update(aliased)
            for lens_name, options in own.items():
                values.setdefault("lens_options", {}).setdefault(lens_name, {}).update(options)
            continue
        if key == name or name not in SETTINGS_KEYS or name == "lens_options":
            if name in ("shifts", "shift_sources"):
                raise ConfigError(f"--set {item.text!r}: the shifts are chosen with --shift KIND:key=value, not --set")
            valid = [SET_PREFIX + k for k in SETTINGS_KEYS if k != "lens_options"]
            raise ConfigError(f"--set {item.text!r}: unknown analysis key {key!r}; valid keys: {', '.join(valid)}, and "
                              f"{SET_PREFIX}lenses.<lens>.<option>{_closest(name, SETTINGS_KEYS, SET_PREFIX)}")  # fmt: skip
        values[name] = value
    return values


def resolve_plan(
    img_size: int,
    *,
    defaults: Mapping[str, Any] | AnalysisPlan | None = None,
    preset_shifts: tuple[str, Mapping[str, Mapping[str, Any]]] | None = None,
    shift_specs: Sequence[ShiftSpec | Shift | str] = (),
    given: Mapping[str, Any] | None = None,
    set_items: Iterable[str | SetItem] = (),
    only_given_shifts: bool = False,
) -> AnalysisPlan:
    """The plan for a model at ``img_size`` px: ``defaults`` (plan key → value, e.g. a preset's analysis defaults;
    or a whole plan, whose shifts are then the base too), then ``given`` (flags or keyword arguments; None means
    not given), then the ``--set analysis.*`` ``set_items``. The shifts: the base plan's, or ``preset_shifts``
    (:func:`peanchor.presets.catalog.preset_shifts`, looked up by the caller) or the resolution rule, with each
    ``--shift`` spec (text, parsed here once, or a :class:`Shift` object, kept as it is) replacing the shift of its
    kind or adding one (:func:`measured_shifts`); with
    ``only_given_shifts``, just the specs' shifts (the API's ``shifts=[...]``: the whole list).

    Returns:
        The checked :class:`AnalysisPlan`.

    Examples:
        >>> plan = resolve_plan(32, defaults={"rpi_draws": 2, "batch_size": 100}, given={"rpi_draws": 3, "seed": None},
        ...                     shift_specs=["jpeg:quality=10"], set_items=["analysis.batch_size=50"])
        >>> plan.rpi_draws, plan.batch_size, plan.seed, plan.shift_sources["jpeg"], list(plan.shifts)
        (3, 50, 0, '--shift jpeg:quality=10', ['jpeg', 'blur'])
    """
    specs = given_shift_specs(shift_specs)
    if only_given_shifts and not specs:
        raise ConfigError("shifts=[]: give at least one shift (accuracy under a shift is part of every analysis)")
    base = defaults if isinstance(defaults, AnalysisPlan) else None
    values: dict[str, Any] = {}
    lens_options: dict[str, dict[str, Any]] = {}  # merged option by option, layer by layer
    set_values = parse_plan_items(set_items)
    for layer in (base.settings() if base is not None else defaults or {}, given or {}, set_values):
        for key, value in layer.items():
            if key not in SETTINGS_KEYS:
                raise ConfigError(f"unknown analysis setting {key!r}; valid: {', '.join(SETTINGS_KEYS)}")
            if key == "lens_options":
                own, aliased = split_lens_options(value)
                values.update(aliased)
                for name, options in own.items():
                    lens_options.setdefault(name, {}).update(options)
            elif value is not None or layer is set_values:  # --set analysis.max_images=null means null
                values[key] = value
    values["lens_options"] = lens_options
    if base is not None:
        shifts, sources = with_shift_specs(img_size, base.shifts, base.shift_sources, specs)
    else:
        shifts, sources = measured_shifts(img_size, specs, preset_shifts)
    if only_given_shifts:
        kinds = {spec.kind for spec in specs}
        shifts = {name: s for name, s in shifts.items() if name in kinds}
        sources = {name: s for name, s in sources.items() if name in kinds}
    return AnalysisPlan(shifts, sources, **values)
