"""``peanchor analyze``: SSDC, the mean attention distance per head and the position-decoding probe per layer
(each normal and under RPI), ΔSSDC, accuracy and Fragility Score under the shifts of the run's preset (a model
without one: the resolution rule of ``paper_shifts``; ``--shift`` replaces or adds one, see
:mod:`peanchor.analysis.shift_specs`), and the α sweep, for one trained model.

The model and its data come from a *subject*: a run directory (``peanchor train`` or ``peanchor import``), a timm
model (``--timm NAME [--weights FILE]``) or a transformers ``save_pretrained`` folder (``--hf DIR``), both through
:mod:`peanchor.adapters`. :func:`resolve_subject` is the one place that turns arguments into a model plus a
:class:`~peanchor.data.DataSpec`; :func:`plan_for` resolves the analysis plan (the run's preset's shifts, the
evaluation flags, ``--set analysis.KEY=VALUE``); the analysis itself is :func:`peanchor.api.analysis.run_analysis`, the
function that ``peanchor.analyze`` runs too.

Imports: at parse time :mod:`peanchor.commands` (shared: the ``--shift`` help and the lenses' names, from their
registries, which load no torch) and :mod:`peanchor.settings.plan` (the settings' flags, light too); when run, :mod:`peanchor.api.analysis`, :mod:`peanchor.analysis`, :mod:`peanchor.presets.catalog` (the run's preset's
shifts), :mod:`peanchor.training` (a run's config), :mod:`peanchor.checkpoint.files`, :mod:`peanchor.adapters`,
:mod:`peanchor.data`, :mod:`peanchor.lenses` (the summary), :mod:`peanchor.core.tracking` (``--tensorboard``),
:mod:`peanchor.core.devices` (``--device``, checked first), :mod:`peanchor.results.records` (an analysis already at
``--out``: :func:`out_beside`), :mod:`peanchor.results.tables` (the header's data and interventions),
:mod:`peanchor.settings.set_items` (the ``--set`` items, read once by :func:`~peanchor.commands.shared.check_set_items`).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peanchor.commands.shared import check_flags, check_set_items, lens_descriptions, lens_list, lens_names, lens_options_help, shift_help, with_data_items
from peanchor.core.errors import ConfigError, PeanchorError
from peanchor.settings.plan import default_text, setting_fields

def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "analyze",
        help=f"measure the lenses ({lens_list()}; normal / RPI), ΔSSDC, Fragility Scores and the α sweep of a "
        "trained model",
        description="Evaluate one model: per layer, with and without random permutation at inference (RPI), every "
        f"lens: {lens_descriptions()}; ΔSSDC = SSDC_RPI(layer 1) - SSDC_RPI(layer 0), top-1 accuracy clean and "
        "under the preset's "
        "shifts (JPEG and blur; --shift changes or adds one), the Fragility Score 1 - acc/clean, and for scalable PEs "
        "(ape, sincos, rope, ...) the PE-scale (α) sweep. Writes analysis.json and analysis.csv (tidy, long format).",
    )
    p.add_argument("run_dir", nargs="?", metavar="RUN_DIR", help="a run directory (from peanchor train or import)")
    p.add_argument("--out", metavar="DIR", help="where to write analysis.json/.csv (default: RUN_DIR/analysis, "
                   "or runs/analyze-timm-NAME with --timm, runs/analyze-hf-NAME with --hf)")  # fmt: skip
    timm = p.add_argument_group("a timm model instead of a run directory (pip install 'peanchor[timm]')")
    timm.add_argument("--timm", metavar="NAME|DIR", help="a timm ViT or EVA-family RoPE ViT, e.g. vit_small_patch16_224, "
                      "or a timm model folder (config.json + model.safetensors, as timm's save_for_hf writes)")
    timm.add_argument("--weights", metavar="FILE", help="its weights: .safetensors, or .pt/.pth read with weights_only")
    timm.add_argument("--num-classes", type=int, metavar="N", help="output classes (default: from the weights' head)")
    timm.add_argument("--timm-arg", action="append", default=[], metavar="KEY=VALUE",
                      help="extra timm.create_model argument, e.g. img_size=384 (repeatable; values parsed as YAML)")  # fmt: skip
    hf = p.add_argument_group("a transformers model instead of a run directory (pip install 'peanchor[transformers]')")
    hf.add_argument("--hf", metavar="DIR", help="a local save_pretrained folder (read offline, no remote code) of a "
                    "ViT, DeiT, DINOv2 (+registers), CLIP or SigLIP vision tower, or DINOv3")  # fmt: skip
    data = p.add_argument_group("data (default: the run's config.yaml)")
    data.add_argument("--data", metavar="NAME", help="evaluate on another dataset (scenes, cifar10, imagenet100, ...)")
    data.add_argument("--data-root", metavar="PATH", help="where that dataset lives")
    data.add_argument("--class-list", metavar="FILE", help="class subset, one WordNet id / class name per line")
    data.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="any other dataset key, e.g. --set data.image_column=img --set data.val_size=500, or an "
                      "analysis setting, e.g. --set analysis.rpi_draws=2 or "
                      f"analysis.lenses=[{','.join(lens_names())}] (over the flags below; repeatable; typed like "
                      f"train --set), or a lens's option: {lens_options_help()}")  # fmt: skip
    ev = p.add_argument_group("evaluation")
    add_setting_flags({"data": data, "evaluation": ev})
    ev.add_argument("--shift", action="append", default=[], metavar="KIND:K=V[,K=V]", help=shift_help())
    ev.add_argument("--device", metavar="DEV", help="auto (default), cpu, cuda, cuda:N")
    ev.add_argument("--no-progress", action="store_true", help="no progress bars")
    ev.add_argument("--tensorboard", action="store_true", help="also log the analysis scalars (accuracy, FS per shift, "
                    "SSDC per layer, ΔSSDC, the α sweep) to TensorBoard event files in OUT/tensorboard "
                    "(pip install 'peanchor[tensorboard]')")  # fmt: skip
    p.set_defaults(func=run)
    return p


def add_setting_flags(groups: dict[str, Any]) -> None:
    """The flags of the analysis plan's settings, from their declarations (:class:`~peanchor.settings.plan.Flag`
    on the fields of :class:`~peanchor.settings.plan.PlanSettings`), each in its group of the help."""
    for setting in setting_fields():
        for flag in setting.flags:
            group = groups[flag.group]
            shown = flag.help or f"{setting.help} (default: {default_text(setting.default)})"
            if flag.metavar is None:
                group.add_argument(flag.name, action="store_true", help=shown)
            elif flag.repeat:
                group.add_argument(flag.name, action="append", default=[], metavar=flag.metavar, help=shown)
            else:  # a value parsed by the flag's own parser is parsed in given_settings: its errors are ours
                kind = str if flag.parse is not None else setting.flag_type()
                group.add_argument(flag.name, type=kind, metavar=flag.metavar, help=shown)


def given_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The settings the flags give (plan key → value; None: not given; of a setting's flags, the one declared last
    wins)."""
    given: dict[str, Any] = {}
    for setting in setting_fields():
        given[setting.name] = None
        for flag in setting.flags:
            value = getattr(args, flag.name.removeprefix("--").replace("-", "_"))
            if flag.metavar is None:
                given[setting.name] = flag.value if value else given[setting.name]
            elif value is not None and value != []:
                given[setting.name] = flag.parse(value) if flag.parse is not None else value
    return given


@dataclass
class Subject:
    """What to analyse: a model with the probe interface, the data it was trained on, and where it came from."""

    model: Any  # behind the analysis interface (peanchor.models.interface.AnalysisInterface)
    spec: Any  # peanchor.data.DataSpec
    name: str
    default_out: Path | None
    source: dict[str, Any] = field(default_factory=dict)  # recorded in analysis.json
    eval_batch_size: int | None = None
    normalization: tuple[tuple[float, ...], tuple[float, ...]] | None = None  # (mean, std) if not the dataset's
    preset: str | None = None  # the run's preset: its shifts are the ones the model is measured under


def subject_from_run_dir(run_dir: str | Path, data: str | None = None) -> Subject:
    """The model and data spec of a run directory (``model.safetensors`` + ``config.yaml``). A ``.safetensors``
    file stands for the run directory holding it (its weights are read); a folder with a model but no
    ``config.yaml`` is analysed on ``data`` (``--data``) when it is given."""
    import peanchor
    from peanchor.checkpoint.files import MODEL_FILE, model_digest
    from peanchor.core.errors import CheckpointError
    from peanchor.training.config import load_config

    run = weights = Path(run_dir)
    if run.is_file():
        run = run.parent
        if not (run / "config.yaml").is_file() and data is None:
            raise CheckpointError(f"{weights} is a weights file, and {run} beside it has no config.yaml: give a run "
                                  "directory, or say what to evaluate it on with --data NAME (for a timm model's "
                                  "weights: --timm NAME --weights FILE)")  # fmt: skip
    elif not run.is_dir():
        raise CheckpointError(f"run directory {run} does not exist")
    else:
        weights = run / MODEL_FILE
    cfg_path = run / "config.yaml"
    if not cfg_path.is_file():
        if data is None:
            raise CheckpointError(f"{run} has no config.yaml: not a peanchor run directory (pass --data to say what to "
                                  "evaluate on)")  # fmt: skip
        if not weights.is_file():
            raise CheckpointError(f"{run} has no config.yaml and no {MODEL_FILE}: not a peanchor run directory")
        model = peanchor.load_model(weights)
        source = {"kind": "weights", "weights": str(weights), "model_digest": model_digest(weights),
                  "model_args": model.model_args}  # fmt: skip
        carried = (model.mean, model.std) if model.mean is not None else None  # what it was trained with
        return Subject(model, None, run.name, run / "analysis", source, normalization=carried)
    config = load_config(cfg_path)
    model = peanchor.load_model(weights)
    source = {
        "kind": "run_dir",
        "run_dir": str(run),
        "model_digest": model_digest(weights),
        "model_args": model.model_args,
        "condition": config.condition,
        "seed": config.train.seed,
    }
    return Subject(model, config.data, run.name, run / "analysis", source, config.train.eval_batch_size,
                   preset=config.preset)  # fmt: skip


def subject_from_timm(args: argparse.Namespace) -> Subject:
    """A timm model (random init unless ``--weights``; never downloaded) evaluated on ``--data``."""
    from peanchor.adapters import load_timm

    if not args.data:
        raise ConfigError("--timm needs --data NAME (and --data-root PATH) to say what to evaluate on")
    model = load_timm(args.timm, weights=args.weights, num_classes=args.num_classes, **parse_timm_args(args.timm_arg))
    source = {"kind": "timm", "model_args": model.model_args, "pe": model.pe_name}
    safe = args.timm.replace("/", "_")
    return Subject(model, None, args.timm, Path("runs") / f"analyze-timm-{safe}", source, None, (model.mean, model.std))


def subject_from_hf(args: argparse.Namespace) -> Subject:
    """A transformers model from a local ``save_pretrained`` folder, evaluated on ``--data``."""
    from peanchor.adapters import load_hf_model

    if not args.data:
        raise ConfigError("--hf needs --data NAME (and --data-root PATH) to say what to evaluate on")
    model = load_hf_model(args.hf)
    source = {"kind": "transformers", "model_args": model.model_args, "pe": model.pe_name}
    name = Path(args.hf).resolve().name
    return Subject(model, None, name, Path("runs") / f"analyze-hf-{name}", source, None, (model.mean, model.std))


def parse_timm_args(items: list[str]) -> dict[str, Any]:
    """``["img_size=64", "depth=2"]`` → ``{"img_size": 64, "depth": 2}``.

    >>> parse_timm_args(["img_size=64", "class_token=false"])
    {'img_size': 64, 'class_token': False}
    """
    import yaml

    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--timm-arg {item!r}: expected KEY=VALUE")
        try:
            out[key.strip()] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise ConfigError(f"--timm-arg {item!r}: the value is not valid YAML") from None
    return out


def resolve_subject(args: argparse.Namespace) -> Subject:
    """Arguments → :class:`Subject`: a run directory, a timm model or a transformers folder."""
    given = [flag for flag, value in (("RUN_DIR", args.run_dir), ("--timm", args.timm), ("--hf", args.hf)) if value]
    if len(given) > 1:
        raise ConfigError(f"give one of RUN_DIR, --timm NAME or --hf DIR, not {' and '.join(given)}")
    if args.timm:
        return subject_from_timm(args)
    if args.weights or args.num_classes or args.timm_arg:
        raise ConfigError("--weights, --num-classes and --timm-arg go with --timm NAME")
    if args.hf:
        return subject_from_hf(args)
    if args.run_dir:
        return subject_from_run_dir(args.run_dir, args.data)
    raise ConfigError("analyze needs a RUN_DIR (from peanchor train or peanchor import), --timm NAME or --hf DIR")


def data_spec_for(subject: Subject, args: argparse.Namespace, data_items: list[Any] | None = None) -> Any:
    """The subject's DataSpec with --data/--data-root/--class-list/--set applied, at the model's resolution.

    Another dataset (``--data``) is used whole: the run's split sizes are dropped with the rest of its data
    section (:meth:`~peanchor.data.spec.DataSpec.for_dataset`, as ``train`` and ``reproduce`` do), and only
    ``--set data.val_size=N`` subsamples it. ``data_items``: the ``--set`` items that are not the plan's, read
    (:func:`~peanchor.commands.shared.check_set_items`); None: ``args.set``'s.
    """
    from peanchor.data import DataSpec
    from peanchor.settings.set_items import split_plan_items

    if data_items is None:
        data_items = split_plan_items(args.set)[0]  # the analysis.* items are the plan's
    spec = subject.spec if subject.spec is not None else DataSpec(name=args.data or DataSpec().name)
    if args.data:
        spec = spec.for_dataset(args.data)
    img_size = int(subject.model.img_size[0])  # (rows, cols) in pixels: the analysis interface declares it
    for item in data_items:
        if item.key.removeprefix("data.") == "img_size":
            raise ConfigError(f"--set {item.text!r}: analyze evaluates at the model's resolution ({img_size} px)")
    flags = {"root": args.data_root, "class_list": args.class_list, "img_size": img_size}
    return with_data_items(spec, flags, data_items)


def plan_for(subject: Subject, args: argparse.Namespace, img_size: int, shift_specs: list[Any],
             plan_items: list[Any] | None = None) -> Any:  # fmt: skip
    """The :class:`~peanchor.analysis.plan.AnalysisPlan`: the plan's defaults (the paper's α grid, one RPI draw, ...)
    with the run's eval batch size and its preset's shifts, then the evaluation flags (``shift_specs``: the parsed
    ``--shift``), then ``--set analysis.KEY=VALUE`` (``plan_items``, read; None: ``args.set``'s)."""
    from peanchor.analysis.plan import resolve_plan
    from peanchor.presets.catalog import preset_shifts
    from peanchor.settings.set_items import split_plan_items

    given = given_settings(args)
    return resolve_plan(
        img_size, defaults={"batch_size": subject.eval_batch_size}, preset_shifts=preset_shifts(subject.preset, img_size),
        shift_specs=shift_specs, given=given,
        set_items=plan_items if plan_items is not None else split_plan_items(args.set)[1],
    )  # fmt: skip


def run(args: argparse.Namespace) -> int:
    check_flags(args)  # a misspelt name fails here, before torch loads
    data_items, plan_items = check_set_items(args.set, "data")  # read once; a misspelt --set key fails here too
    from peanchor.analysis.evalset import EvalSet
    from peanchor.analysis.shift_specs import parse_shift_specs
    from peanchor.api.analysis import match_classes, run_analysis
    from peanchor.core.devices import resolve_device

    shift_specs = parse_shift_specs(args.shift)  # a bad --shift fails before the model is read
    device = resolve_device(args.device)  # and a device this machine does not have
    if args.tensorboard:
        from peanchor.core.tracking import require_tensorboard

        require_tensorboard()
    subject = resolve_subject(args)
    out = Path(args.out) if args.out else subject.default_out
    if out is None:
        raise ConfigError("say where to write the analysis with --out DIR")
    spec = data_spec_for(subject, args, data_items)
    plan = plan_for(subject, args, spec.img_size, shift_specs, plan_items)
    progress = None if not args.no_progress else False
    evalset = EvalSet.from_spec(spec, plan.max_images, progress=progress)
    info = evalset.info
    if subject.normalization is not None:
        info = dataclasses.replace(info, mean=tuple(subject.normalization[0]), std=tuple(subject.normalization[1]))
    # The classes must match, as peanchor.analyze checks for a named dataset: an ImageNet-1k head on an ImageNet
    # subset keeps those logits; any other mismatch (a 10-class run on a 2-class folder) is one line.
    match_classes(subject.model, list(info.classes))
    out = out_beside(out, plan, evalset.fingerprint, explicit=bool(args.out))  # never over other settings
    result = run_analysis(subject.model, evalset, info, plan, source={**subject.source, "data": spec.to_dict()},
                          device=device, progress=progress)  # fmt: skip
    path = result.save(out)
    print(summary_text(result, subject.name))
    print(f"wrote {path} and {path.with_suffix('.csv')}")
    if args.tensorboard:
        from peanchor.core.tracking import TENSORBOARD_DIR, TensorBoardLog, log_analysis

        with TensorBoardLog(out / TENSORBOARD_DIR) as log:
            log_analysis(log, result)
        print(f"TensorBoard: tensorboard --logdir {out / TENSORBOARD_DIR}")
    return 0


def setting_differences(stored: Any, plan: Any, fingerprint: str) -> list[str]:
    """What differs between the analysis ``stored`` and one made with ``plan`` on images ``fingerprint``: one
    ``name stored → new`` per setting (the device and where a shift came from are records, not settings); empty
    when ``stored`` answers ``plan``. A stored analysis that no longer reads as a plan differs in everything."""
    from peanchor.analysis.plan import AnalysisPlan
    from peanchor.core.errors import PeanchorError
    from peanchor.results.records import to_json_dict

    try:
        applied = plan.for_model(stored.model.scalable)
        old = to_json_dict(AnalysisPlan.from_result(stored).settings_record(stored.settings.evalset, ""))
    except PeanchorError as e:
        return [f"its plan ({e})"]
    new = to_json_dict(applied.settings_record(fingerprint, ""))
    out = [f"{k} {old.get(k)!r} → {new.get(k)!r}" for k in new if k != "device" and old.get(k) != new.get(k)]
    if to_json_dict({k: v.describe() for k, v in applied.shifts.items()}) != to_json_dict(stored.shifts):
        out.append("shifts")
    return out


def out_beside(out: Path, plan: Any, fingerprint: str, explicit: bool) -> Path:
    """Where to write the analysis so that none made with other settings is replaced: ``out`` when it holds none,
    or one with the same settings (rewritten); else, for the default place, the first ``out-2``, ``out-3``, ...
    that is free or holds the same settings; for an ``--out`` given, one line that refuses."""
    from peanchor.results.records import ANALYSIS_JSON, read_analysis

    candidate, index = out, 1
    while (candidate / ANALYSIS_JSON).exists():
        try:
            differ = setting_differences(read_analysis(candidate), plan, fingerprint)
        except PeanchorError as e:
            differ = [f"it does not read ({e})"]
        if not differ:
            return candidate
        if explicit:
            raise ConfigError(f"{candidate / ANALYSIS_JSON} holds an analysis made with other settings "
                              f"({'; '.join(differ)}); give another --out DIR, or remove it")  # fmt: skip
        if index == 1:
            print(f"{out} holds an analysis made with other settings ({'; '.join(differ)}): writing beside it "
                  "(--out DIR to choose)")  # fmt: skip
        index += 1
        candidate = out.with_name(f"{out.name}-{index}")
    return candidate


def _fs(record: Any, shift: str, short: bool = False) -> str:
    """FS at ``shift`` of an analysis or an α point: the number, or ``undefined (reason)`` (``undef.`` in a
    column), never a number where the clean accuracy is not above chance."""
    reason = (getattr(record, "fragility_undefined", None) or {}).get(shift)
    if reason:
        return "undef." if short else f"undefined ({reason})"
    return _f(record.fragility.get(shift))


def _f(v: Any, digits: int = 3) -> str:
    return "n/a" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.{digits}f}"


def _ci(bounds: Any, digits: int = 3) -> str:
    return f" [{_f(bounds[0], digits)}, {_f(bounds[1], digits)}]" if bounds else ""


def summary_text(result: Any, name: str = "") -> str:  # result: peanchor.results.records.AnalysisResult
    """A few lines for the terminal: accuracies, FS, ΔSSDC, every lens per layer and the α sweep, each number with
    its interval where the analysis had a bootstrap; an FS that is undefined says why."""
    from peanchor.lenses import LENSES

    from peanchor.results.tables import data_text, interventions_text

    r = result
    lines = [f"{name}: {r.num_images} images, {r.forward_passes} passes, {r.seconds:.1f} s",
             f"  data: {data_text(r)}; interventions: {interventions_text(r)}"]  # fmt: skip
    acc_ci, fs_ci = r.acc_ci or {}, r.fragility_ci or {}
    shifts = ", ".join(f"{k} {_f(r.acc[k])}{_ci(acc_ci.get(k))} (FS {_fs(r, k, short=True)}{_ci(fs_ci.get(k))})"
                       for k in r.acc)  # fmt: skip
    chance = f" (chance {_f(r.chance)})" if r.chance is not None else ""
    lines.append(f"  top-1 clean {_f(r.clean_acc)}{_ci(r.clean_acc_ci)}, RPI {_f(r.rpi_acc)}{_ci(r.rpi_acc_ci)}, "
                 f"{shifts}{chance}")  # fmt: skip
    lines += [f"  FS {k}: undefined, {why}" for k, why in (r.fragility_undefined or {}).items()]
    lines.append(f"  ΔSSDC (RPI, layer 1 - layer 0) {_f(r.delta_ssdc)}{_ci(r.delta_ssdc_ci)}"
                 + (f"  ({r.ci_level:.0%} intervals: bootstrap over groups of images)" if r.ci_level else ""))
    for name, lens in LENSES.items():
        record = r.lens(name)
        lines += lens.summary_lines(record) if record is not None else []
    lines += [f"  {name}: FAILED ({error})" for name, error in r.lens_failures.items()]
    lines += [f"  note: {note}" for note in r.notes or ()]
    for kind, values in (r.severity_fragility or {}).items():
        lines.append(f"  {kind} severities 1-5: FS " + " ".join(_f(v, 2) for v in values))
    if r.alpha_sweep:
        lines.append("  alpha   ΔSSDC [interval]      clean [interval]      " + "  ".join(f"FS {k}" for k in r.acc))
        for e in r.alpha_sweep:
            fs = "  ".join(f"{_fs(e, k, short=True)}{_ci((e.fragility_ci or {}).get(k))}" for k in r.acc)
            lines.append(f"  {e.alpha:5.2f}  {_f(e.delta_ssdc):>6}{_ci(e.delta_ssdc_ci):<16}  {_f(e.clean_acc):>5}"
                         f"{_ci(e.clean_acc_ci):<16}  {fs}")  # fmt: skip
        reasons = {f"α = {e.alpha:g}, {k}: {why}"
                   for e in r.alpha_sweep for k, why in (e.fragility_undefined or {}).items()}  # fmt: skip
        lines += [f"  FS undefined at {text}" for text in sorted(reasons)]
    for key, trend in (getattr(r, "alpha_trends", None) or {}).items():
        excluded = f"; left out: {', '.join(f'α={a} ({why})' for a, why in trend.excluded.items())}" if \
            trend.excluded else ""  # fmt: skip
        lines.append(f"  trend of {key} along α: slope {_f(trend.slope)}{_ci(trend.ci)} over {len(trend.alphas)} "
                     f"points{excluded}")  # fmt: skip
    return "\n".join(lines)
