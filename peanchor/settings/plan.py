"""The analysis plan's settings, declared once: each one's name, type, default, help and command-line flags.

:class:`PlanSettings` is the base of :class:`peanchor.analysis.plan.AnalysisPlan`, which adds the shifts, the checks
(its ``__post_init__``) and the three layers (``resolve_plan``). Everything else that names a setting is derived
from these fields:

* ``peanchor.analyze(model, data, **settings)`` takes exactly their names as keywords (:func:`check_setting_names`:
  an unknown one is one line with the closest name);
* ``peanchor analyze`` builds its flags from each field's :class:`Flag` declarations, their help from the field's;
* ``analysis.json`` records them (:class:`peanchor.results.records.AnalysisSettings` is made from :func:`setting_fields`);
* the table of settings in docs/python.md is :func:`settings_table` (a test keeps the page equal to it).

A new setting is therefore one field here, declared with :func:`setting` (its help and, if the command line sets
it, its flags), plus its check in ``AnalysisPlan.__post_init__``. Declared ``recorded="optional"``, a setting that
older ``analysis.json`` files lack reads back as None there (``AnalysisPlan.from_result`` says what None meant).

The fields are keyword-only, so that ``AnalysisPlan(shifts, shift_sources, **settings)`` keeps its shifts first.

Imports: :mod:`peanchor.lenses` (the SSDC and probe options' defaults), :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from peanchor.core.errors import ConfigError, did_you_mean
from peanchor.lenses.position_probe import PositionProbeOptions
from peanchor.lenses.ssdc import SSDCOptions

__all__ = ["DEFAULT_ALPHAS", "Flag", "PlanSettings", "SettingField", "check_setting_names", "parse_alphas",
           "parse_sizes", "default_text", "setting", "setting_fields", "settings_table"]  # fmt: skip

# The paper's grid (1.0, 0.9, ..., 0.1) plus α = 0 (no positional information at all).
DEFAULT_ALPHAS: tuple[float, ...] = tuple(round(1.0 - 0.1 * i, 1) for i in range(11))
SSDCMode = Literal["mean_similarity", "per_image"]
Metric = Literal["manhattan", "euclidean"]
RPIMode = Literal["per_image", "per_call"]
HELP, FLAGS, RECORDED, SET_FORM, RECORD_TYPE = "help", "flags", "recorded", "set_form", "record_type"  # metadata keys


def parse_alphas(text: str) -> list[float]:
    """``"1,0.5,0"`` → ``[1.0, 0.5, 0.0]`` (``--alphas``; the values are checked by the analysis plan).

    >>> parse_alphas("1, .5,0")
    [1.0, 0.5, 0.0]
    """
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"--alphas {text!r}: expected comma-separated numbers, e.g. 1,0.5,0") from None
    if not values:
        raise ConfigError(f"--alphas {text!r}: expected comma-separated numbers, e.g. 1,0.5,0 (--no-alpha skips the "
                          "sweep)")  # fmt: skip
    return values


def parse_sizes(text: str, flag: str) -> list[int]:
    """``"16,24"`` → ``[16, 24]`` (``--resolutions``; the values are checked by the analysis plan).

    >>> parse_sizes("16, 24", "--resolutions")
    [16, 24]
    """
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: expected comma-separated image sizes in px, e.g. 16,24,40,48") from None


@dataclass(frozen=True)
class Flag:
    """A command-line flag of ``peanchor analyze`` that sets one setting. With a ``metavar`` it takes a value
    (parsed by ``parse``, else by the setting's type: int, float or text; ``repeat``: given again, the values make a
    list); without one it is a switch that sets ``value``. Of a setting's flags given together, the one declared
    last wins (``--no-alpha`` over ``--alphas``)."""

    name: str  # "--rpi-draws"
    metavar: str | None = None
    value: Any = True  # what a switch sets
    help: str | None = None  # None: the setting's help, with its default
    parse: Callable[[str], Any] | None = None
    repeat: bool = False
    group: str = "evaluation"  # the help's section


def setting(default: Any, help: str, *, flags: tuple[Flag, ...] = (), recorded: str = "always",
            set_form: str | None = None, record_type: Any = None) -> Any:  # fmt: skip
    """A field of :class:`PlanSettings`: its default, one line of help (for the docs' table and the flags), its
    flags, ``recorded="optional"`` for a setting that older files lack, for the docs' table how ``--set``
    spells it when no flag does (default ``analysis.<name>=...``), and ``record_type``, its type in the files when
    the plan holds objects that the files write as text (the edits: their specs)."""
    return field(default=default, metadata={HELP: help, FLAGS: flags, RECORDED: recorded, SET_FORM: set_form,
                                            RECORD_TYPE: record_type})  # fmt: skip


@dataclass(frozen=True, kw_only=True)
class PlanSettings:
    """Every setting of an analysis but its shifts, with its default (the checks are ``AnalysisPlan``'s)."""

    alphas: tuple[float, ...] = setting(
        DEFAULT_ALPHAS, "the PE scales of the α sweep (1: the PE as trained, 0: none); () skips the sweep",
        flags=(Flag("--alphas", "LIST", parse=parse_alphas, help="PE scales for the α sweep, e.g. 1,0.5,0 (default: "
                    "1.0, 0.9, ..., 0.0)"), Flag("--no-alpha", value=(), help="skip the α sweep")))  # fmt: skip
    rpi_draws: int = setting(1, "independent RPI permutation streams (mean ± std)", flags=(Flag("--rpi-draws", "K"),))
    rpi_mode: RPIMode = setting(
        "per_image", "RPI's permutations: per_image (each image its own, from a stream keyed by seed, draw and image "
        "index: nothing depends on the batch) or per_call (the paper's: one per forward call, shared by the batch, "
        "so SSDC under RPI depends on batch_size)",
        flags=(Flag("--rpi-mode", "MODE", help="per_image (default: a permutation per image, independent of the "
                    "batch) or per_call (the paper's: one per forward call, shared by the batch)"),),
        recorded="optional")  # fmt: skip
    seed: int = setting(0, "seed of the RPI permutations, the bootstrap and the probe's split",
                        flags=(Flag("--seed", "N"),))  # fmt: skip
    batch_size: int = setting(
        256, "evaluation batch size (no number depends on it, except under rpi_mode per_call)",
        flags=(Flag("--batch-size", "N", help="evaluation batch size (default: the run's eval batch size)"),))
    max_images: int | None = setting(
        None, "a deterministic random subset of this many evaluation images (None: every image)",
        flags=(Flag("--images", "N", group="data", help="a deterministic random subset of N evaluation images"),),
        recorded="optional")  # fmt: skip
    severities: bool = setting(False, "also the severity 1-5 sweep of every measured kind (the ImageNet-C-style "
                               "table for the model's resolution)", flags=(Flag("--severities"),))  # fmt: skip
    # The SSDC and probe options (SSDCOptions, PositionProbeOptions; analysis.lenses.ssdc.mode is ssdc_mode, ...)
    ssdc_mode: SSDCMode = setting(
        SSDCOptions.mode, "SSDC of the mean similarity matrix (the paper's) or the mean of per-image SSDCs",
        flags=(Flag("--per-image", value="per_image", help="SSDC as the mean of per-image SSDCs (default: the paper's "
                    "SSDC of the mean similarity matrix)"),))  # fmt: skip
    metric: Metric = setting(SSDCOptions.metric, "the grid distance of SSDC: manhattan (the paper's) or euclidean",
                             flags=(Flag("--euclidean", value="euclidean", help="Euclidean grid distance (default: "
                                         "Manhattan, the paper's)"),))  # fmt: skip
    bootstrap: int = setting(SSDCOptions.bootstrap, "replicates of the bootstrap over groups of images that gives "
                             "every estimate its percentile interval, 95 percent (0: no intervals)",
                             flags=(Flag("--bootstrap", "R"),))  # fmt: skip
    bootstrap_groups: int = setting(50, "the groups of images the bootstrap resamples (image i is in group i mod G; "
                                    "G is at most the number of images)", recorded="optional")  # fmt: skip
    probe_ridge: float = setting(PositionProbeOptions.ridge, "the position probe's ridge λ relative to the mean "
                                 "feature variance", flags=(Flag("--probe-ridge", "X"),))  # fmt: skip
    probe_holdout: float = setting(PositionProbeOptions.holdout, "the fraction of the images the position probe is "
                                   "scored on, drawn with the seed; the rest fit it",
                                   flags=(Flag("--probe-holdout", "F"),))  # fmt: skip
    lenses: tuple[str, ...] | None = setting(None, "which lenses are measured (ssdc always); None: every registered "
                                             "one", recorded="optional", set_form="analysis.lenses=[...]")  # fmt: skip
    # The edits as objects (peanchor.interventions.Edit, Hook included), given as objects or as spec text; the files
    # record their specs.
    interventions: tuple[Any, ...] = setting(
        (), "the edits every pass runs under, in order: Edit objects (a Hook too) or their spec text "
        "(docs/interventions.md)", record_type=tuple[str, ...],
        flags=(Flag("--intervention", "KIND:K=V[,K=V]", repeat=True, help="an edit every pass runs under (repeatable, "
                    "or several joined with +): pe_zero, pe_shuffle, pe_resample, rope_planes, head_ablate, patch, or "
                    "hook:point=POINT,fn=MODULE:NAME (your function); docs/interventions.md"),
               Flag("--interventions", "KIND:K=V[,K=V]", repeat=True, help="the same as --intervention")),
        recorded="optional")  # fmt: skip
    # lens → option → value, for the measured lenses with options of their own (all of them, defaults filled in);
    # an option that is a plan field above (ssdc.mode) sets that field
    lens_options: Mapping[str, Mapping[str, Any]] | None = setting(
        None, "each lens's own options, {lens: {option: value}}, over the defaults of its options_type",
        recorded="optional", set_form="analysis.lenses.<lens>.<option>=...")  # fmt: skip
    sweeps: tuple[str, ...] = setting(
        (), "dose-response sweeps over the edits: the last parameter is swept over its comma-separated doses "
        "(docs/interventions.md)",
        flags=(Flag("--sweep", "KIND:[K=V,]PARAM=DOSE,DOSE", repeat=True, help="a dose-response sweep over the edits "
                    "(repeatable): the last parameter is swept over its comma-separated doses (A..B: a range; a set "
                    "of indices joined with +), e.g. rope_planes:freqs=none,0-3,0-7 or pe_resample:grid=7x7,14x14; "
                    "top-1, FS and every lens, in order and under RPI, at each dose; docs/interventions.md"),),
        recorded="optional")  # fmt: skip
    resolutions: tuple[int, ...] = setting(
        (), "image sizes in px (multiples of the patch) at which top-1 is also measured, each PE moved to that grid "
        "by its own convention, with A(size)/A(native) (docs/analysis.md, \"Other resolutions\"); () skips it",
        flags=(Flag("--resolutions", "LIST", parse=lambda text: parse_sizes(text, "--resolutions"), help="image sizes "
                    "in px, e.g. 16,24,40,48: top-1 there too, each PE at that grid by its own convention, with "
                    "A(size)/A(native) (docs/analysis.md)"),), recorded="optional")  # fmt: skip


@dataclass(frozen=True)
class SettingField:
    """One setting as the rest of peanchor reads it: from a field of :class:`PlanSettings`."""

    name: str
    type: Any  # the resolved annotation, e.g. tuple[float, ...]
    default: Any
    help: str
    flags: tuple[Flag, ...]
    optional_in_files: bool  # older analysis.json files lack it
    set_form: str  # how --set spells it: analysis.rpi_draws=...
    recorded_as: Any = None  # its type in the files, when not its own (the edits: their spec text)

    @property
    def record_type(self) -> Any:
        """Its type in ``analysis.json``: tuples are lists and mappings dicts, Literals text; None allowed when
        older files lack it."""
        recorded = _json_type(self.type if self.recorded_as is None else self.recorded_as)
        return recorded | None if self.optional_in_files and not _allows_none(recorded) else recorded

    def flag_type(self) -> Callable[[str], Any]:
        """How a flag's text becomes a value: int or float for such settings, else the text."""
        base = [t for t in (typing.get_args(self.type) or (self.type,)) if t is not type(None)]
        return base[0] if base and base[0] in (int, float) else str


def _allows_none(tp: Any) -> bool:
    return type(None) in typing.get_args(tp)


def _json_type(tp: Any) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Literal:
        return str
    if origin is tuple:
        return list[_json_type(args[0])]
    if origin is Mapping or origin is dict:
        return dict[_json_type(args[0]), _json_type(args[1])]  # type: ignore[misc]
    if origin in (typing.Union, types.UnionType):
        out = _json_type(args[0])
        for arg in args[1:]:
            out = out | _json_type(arg)
        return out
    return tp


def setting_fields() -> Iterator[SettingField]:
    """The settings, in :class:`PlanSettings`' order."""
    hints = typing.get_type_hints(PlanSettings)
    for f in dataclasses.fields(PlanSettings):
        yield SettingField(f.name, hints[f.name], f.default, f.metadata[HELP], f.metadata[FLAGS],
                           f.metadata[RECORDED] == "optional", f.metadata[SET_FORM] or f"analysis.{f.name}=...",
                           f.metadata[RECORD_TYPE])  # fmt: skip


def check_setting_names(names: Iterable[str], where: str = "peanchor.analyze()") -> None:
    """Every name a setting's, or one :class:`ConfigError` line for the first that is not, with the closest.

    >>> check_setting_names(["rpi_draw"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    peanchor.core.errors.ConfigError: peanchor.analyze(): unknown setting 'rpi_draw'; valid: ... (did you mean rpi_draws?)
    """
    valid = [f.name for f in dataclasses.fields(PlanSettings)]
    for name in names:
        if name not in valid:
            hint = did_you_mean(name, valid)
            raise ConfigError(f"{where}: unknown setting {name!r}; valid: {', '.join(valid)}{hint}")


def default_text(value: Any) -> str:
    """A default as the help and the docs' table say it."""
    if value == DEFAULT_ALPHAS:
        return "1.0, 0.9, ..., 0.0"
    if isinstance(value, bool):
        return "on" if value else "off"
    if value is None or value == ():
        return "none" if value == () else "None"
    return ", ".join(map(str, value)) if isinstance(value, tuple) else (f"`{value}`" if isinstance(value, str)
                                                                           else str(value))  # fmt: skip


def settings_table() -> str:
    """The Markdown table of the settings (docs/python.md shows it between its ``settings`` markers): the keyword,
    the ``peanchor analyze`` flags, the default and what it does."""
    lines = ["| setting | CLI | default | what it is |", "|---|---|---|---|"]
    for s in setting_fields():
        flags = ", ".join(f"`{f.name}`" for f in s.flags) or f"`--set {s.set_form}`"
        lines.append(f"| `{s.name}` | {flags} | {default_text(s.default)} | {s.help.replace('|', '/')} |")
    return "\n".join(lines) + "\n"
