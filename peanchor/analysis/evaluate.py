"""The evaluation suite: geometry (the lenses, :mod:`peanchor.lenses`: SSDC, ΔSSDC, the position probe, the
attention distance, the effective rank, ...), robustness (accuracy, Fragility Score) and the α sweep, as an
:class:`~peanchor.analysis.plan.AnalysisPlan` says.

Everything is measured from as few passes over the evaluation set as possible, and geometry comes
out of the same passes as accuracy (each row is one ``forward_intermediates`` call per batch):

========================== ============================================================ =========================
pass                       yields                                                       forward_intermediates
========================== ============================================================ =========================
clean, α = 1               clean top-1 and every lens per layer (RPI off)               every layer, the head
RPI draw k, α = 1          the lenses per layer under RPI, RPI top-1                    every layer, the head
RPI draw k, per image      per-call RPI only: the lenses that ask for one permutation   every layer, no head
                           per image (the probe)
shift s, α = 1             top-1 under each shift (and each severity, on request)       ``layers=0``, the head
clean / shift s, α ≠ 1     the α sweep's accuracies (RPI off)                           ``layers=0``, the head
RPI draw k, α ≠ 1          ΔSSDC at α: only layers 0 and 1 are needed                   ``layers=2``, no head
========================== ============================================================ =========================

``forward_passes`` in the result counts these model calls over the whole set (a truncated
``layers=2`` pass counts as one too; ``passes`` in the result itemises them). Passes that
would repeat an identical computation (a severity equal to a main shift, α = 1 in the sweep) are
reused, not rerun.

The lenses (docs/lenses.md) are the plan's ``lenses`` (SSDC always) that apply to the model and the data: each is
fed from the same full passes, and records the normal pass and the mean over RPI draws. A lens that fails records a
:class:`~peanchor.lenses.LensFailure` instead, and everything else is measured as usual. The position probe is
fitted on a split of the evaluation images drawn with ``seed`` and scored on the rest.

RPI (``rpi_mode`` ``"per_image"``, the default) gives every image its own permutation, from a stream keyed by (seed,
draw, the image's index): the same at every batch size, shard and α, so no number depends on ``batch_size``; the
α sweep compares α values on identical permutations. ``"per_call"`` is the paper's estimator, one permutation per
forward call shared by the batch (seeded ``seed + draw``): the same estimand, but its variance, and with few
batches its value, depend on ``batch_size`` (on the demo's RoPE model, SSDC under RPI at layer 0, which is 0 by
construction, was 0.00 at batch 25 and 0.11 at batch 500, not a slight dependence); there the probe gets a pass of its
own with one permutation per image.

Every estimate has a percentile interval from one bootstrap over groups of images (:mod:`peanchor.metrics.bootstrap`,
:mod:`peanchor.analysis.intervals`): the accumulators keep per-group sums, one ``(R, G)`` matrix of resampling
counts serves every quantity, so ΔSSDC, FS and the slopes along α get joint intervals. FS is NaN, with the reason,
where the clean accuracy is not above chance by its interval.

:func:`evaluate_model` is three steps: (a) :meth:`PassPlan.of` plans the passes (the clean pass, the RPI draws,
the shifts, their severities, the α sweep), (b) :class:`~peanchor.analysis.passes.PassRunner` runs each distinct one
once, (c) the :class:`~peanchor.results.records.AnalysisResult` is assembled from what they gave. ΔSSDC and the α sweep read
SSDC through the lens's public :meth:`~peanchor.lenses.Lens.curve`, like any lens measured in the truncated passes.

Models need the analysis interface (:class:`~peanchor.models.interface.AnalysisInterface`): ``forward_intermediates``
and what it declares (``grid``, ``depth``, ``num_prefix``, ``has_attention_weights``, ``pe_name``, ``pe_scalable``:
whether α means anything); anything else is refused in one line. An adapter around a foreign model (a timm or
transformers ViT) is therefore evaluated unchanged. The result is an :class:`peanchor.results.records.AnalysisResult`
(written as analysis.json by :func:`peanchor.results.records.write_analysis`).

Imports: :mod:`peanchor.analysis` (plan, shifts, evalset, passes, dose_sweep, resolution, intervals, environment),
:mod:`peanchor.lenses`, :mod:`peanchor.metrics`, :mod:`peanchor.results.records`, :mod:`peanchor.core.bars`, :mod:`peanchor.core.devices`, :mod:`peanchor.models` (the interface).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.dose_sweep import measure_dose_sweeps
from peanchor.analysis.plan import DEFAULT_ALPHAS, AnalysisPlan, resolve_plan
from peanchor.analysis.resolution import measure_resolution
from peanchor.analysis.shifts import Shift, severity_table, table_name
from peanchor.core.bars import progress_bar
from peanchor.core.devices import resolve_device
from peanchor.analysis.environment import analysis_environment
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.intervals import Estimate, Resampler, alpha_trend, chance_reason
from peanchor.analysis.passes import PassRunner, PassSpec
from peanchor.core.errors import ConfigError, DataError
from peanchor.lenses import LENSES, Lens, LensContext, LensFailure
from peanchor.lenses.ssdc import SSDCLens
from peanchor.metrics import fragility_score
from peanchor.models.interface import AnalysisInterface
from peanchor.results.records import AlphaTrend, AnalysisResult, ModelInfo, SweepPoint

__all__ = ["DEFAULT_ALPHAS", "PassPlan", "SweepPasses", "evaluate_model", "measure_lenses"]  # DEFAULT_ALPHAS: the plan's (peanchor.analysis.plan)


# ----------------------------------------------------------------------------------------------
# The model and its lenses


def _interface(model: Any) -> AnalysisInterface:
    """``model`` if it implements the analysis interface; anything else is one ConfigError line."""
    if not isinstance(model, AnalysisInterface):
        raise ConfigError(f"cannot analyse a {type(model).__module__}.{type(model).__name__}: the analysis reads a "
                          "model through peanchor.models.interface.AnalysisInterface (peanchor.analyze wraps timm "
                          "and transformers models in it)")  # fmt: skip
    return model


def measured_lenses(model: AnalysisInterface, num_images: int, settings: Mapping[str, Any],
                    chosen: Sequence[str] | None = None, options: Mapping[str, Any] | None = None) -> dict[str, Lens]:  # fmt: skip
    """The lenses an analysis measures: the ``chosen`` ones (None: every registered lens) and the required ones, of
    those that apply to ``model`` on ``num_images`` images, built on one :class:`LensContext`, each with its typed
    ``options`` (:meth:`AnalysisPlan.lens_options_typed`; a lens not in them reads them from the settings)."""
    context = LensContext(
        grid=tuple(int(g) for g in model.grid), num_prefix=int(model.num_prefix),  # type: ignore[arg-type]
        depth=int(model.depth), num_images=num_images, has_attention_weights=bool(model.has_attention_weights),
        settings=dict(settings),
    )  # fmt: skip
    return {name: lens(context, (options or {}).get(name)) for name, lens in LENSES.items()
            if (lens.required or chosen is None or name in chosen) and lens.applies(context)}  # fmt: skip


def _own_passes(lenses: Mapping[str, Lens], rpi_draws: int, rpi_mode: str) -> int:
    """The passes of their own the lenses ask for: under per-call RPI, one per RPI draw where a lens is fed one
    permutation per image (per-image RPI feeds every lens from the draw's own pass)."""
    if rpi_mode != "per_call":
        return 0
    return rpi_draws if any(lens.rpi == "per_image" for lens in lenses.values()) else 0


def _groups(lenses: Mapping[str, Lens]) -> int:
    """The groups of the analysis's bootstrap (the lenses share one context; 0: no bootstrap)."""
    return next(iter(lenses.values())).context.groups if lenses else 0


def _record(lens: Lens, runner: PassRunner, clean: PassSpec, rpi: Sequence[PassSpec]) -> Any:
    """The lens's record from the normal pass and the RPI draws, or its :class:`LensFailure` where it failed in a
    pass or fails here (a ``required`` lens's failure is raised)."""
    failure = runner.failed.get(lens.name)
    if failure is not None:
        return failure
    try:
        return lens.record(runner.run(clean).states[lens.name], [runner.run(p).states[lens.name] for p in rpi])
    except Exception as e:  # one lens must not lose the cell
        if lens.required:
            raise
        return LensFailure.of(e)


# ----------------------------------------------------------------------------------------------
# (a) the plan of the passes


@dataclass(frozen=True)
class SweepPasses:
    """The passes of one α ≠ 1 of the sweep: accuracy on the clean and the shifted images (RPI off), and the
    truncated RPI draws that ΔSSDC at that α reads (layers 0 and 1)."""

    clean: PassSpec
    shifted: Mapping[str, PassSpec]  # shift name → its pass
    rpi: tuple[PassSpec, ...]  # probes "first2", one per RPI draw


@dataclass(frozen=True)
class PassPlan:
    """Every pass an analysis runs, planned up front (the progress bar knows its length, duplicates collapse):
    the clean pass and the RPI draws at α = 1 (every lens), the shifts and their severities at α = 1 (accuracy), and
    the α sweep. :attr:`passes` lists them in the order they run."""

    clean: PassSpec
    rpi: tuple[PassSpec, ...]
    shifted: Mapping[str, PassSpec]  # shift name → its pass
    severities: Mapping[str, tuple[PassSpec, ...]]  # kind → a pass per severity, 1..5
    sweep: Mapping[float, SweepPasses]  # α ≠ 1 → its passes

    @classmethod
    def of(cls, applied: AnalysisPlan, severity_shifts: Mapping[str, Sequence[Shift]]) -> PassPlan:
        """The passes of the plan ``applied`` (as it applies to the model) with the severity sweeps' shifts."""
        draws, shifts = applied.rpi_draws, applied.shifts
        return cls(
            clean=PassSpec(None, 1.0, "all", None),
            rpi=tuple(PassSpec(None, 1.0, "all", k) for k in range(draws)),
            shifted={name: PassSpec(s, 1.0, "none", None) for name, s in shifts.items()},
            severities={kind: tuple(PassSpec(s, 1.0, "none", None) for s in group)
                        for kind, group in severity_shifts.items()},  # fmt: skip
            sweep={a: SweepPasses(PassSpec(None, a, "none", None),
                                  {name: PassSpec(s, a, "none", None) for name, s in shifts.items()},
                                  tuple(PassSpec(None, a, "first2", k) for k in range(draws)))
                   for a in applied.alphas if a != 1.0},  # fmt: skip
        )

    @property
    def passes(self) -> list[PassSpec]:
        """Every distinct pass, in the order they run."""
        passes = [self.clean, *self.rpi, *self.shifted.values(), *(p for g in self.severities.values() for p in g)]
        for point in self.sweep.values():
            passes += [point.clean, *point.shifted.values(), *point.rpi]
        return list(dict.fromkeys(passes))  # unique, in order

    @property
    def shifts(self) -> list[Shift]:
        """Every distinct shift a pass reads, in the order the passes name them."""
        return list(dict.fromkeys(p.shift for p in self.passes if p.shift is not None))


def _corrupted_sets(evalset: EvalSet, shifts: Sequence[Shift], cache: CorruptedCache) -> dict[Shift, Tensor]:
    """Every set corrupted once (CPU, memoised in the cache across models and α values)."""
    return {shift: cache.get(evalset.images, shift, key=evalset.fingerprint) for shift in shifts}


# ----------------------------------------------------------------------------------------------
# (b) running them


def _run_passes(model: AnalysisInterface, evalset: EvalSet, info: Any, applied: AnalysisPlan, plan: PassPlan,
                lenses: Mapping[str, Lens], sets: Mapping[Shift, Tensor], device: torch.device,
                progress: bool | None) -> PassRunner:  # fmt: skip
    """Every pass of ``plan`` run once on ``device``, the model in eval mode (its train/eval state restored after);
    the runner holds their results."""
    total = (len(plan.passes) + _own_passes(lenses, applied.rpi_draws, applied.rpi_mode)) * math.ceil(
        len(evalset) / applied.batch_size)  # fmt: skip
    was_training = model.training
    model.to(device).eval()
    try:
        with progress_bar(total=total, desc="evaluate", unit="batch", show=progress, leave=False) as bar:
            runner = PassRunner(
                model, evalset, info.mean, info.std, sets=sets, batch_size=applied.batch_size, device=device,
                seed=applied.seed, lenses=lenses, bar=bar, edits=applied.interventions,
                rpi_mode=applied.rpi_mode, groups=_groups(lenses),
            )  # fmt: skip
            for spec in plan.passes:
                bar.set_postfix_str(spec.label, refresh=False)
                runner.run(spec)
    finally:
        model.train(was_training)
    return runner


def _dose_sweeps(model: AnalysisInterface, evalset: EvalSet, info: Any, applied: AnalysisPlan,
                 sets: Mapping[Shift, Tensor], runner: PassRunner, lenses: Mapping[str, Lens], device: torch.device,
                 progress: bool | None) -> tuple[Any, list[str]]:  # fmt: skip
    """The plan's dose-response sweeps (:mod:`peanchor.analysis.dose_sweep`) on the images, lenses and fitted edits
    of the main passes, and their notes; ``(None, [])`` without sweeps."""
    if not applied.sweeps:
        return None, []
    was_training = model.training
    model.to(device).eval()
    try:
        return measure_dose_sweeps(
            model, evalset, applied, sets={"clean": evalset.images, **{n: sets[s] for n, s in applied.shifts.items()}},
            lenses=lenses, base=runner.edits, mean=info.mean, std=info.std, device=device, progress=progress,
        )  # fmt: skip
    finally:
        model.train(was_training)


# ----------------------------------------------------------------------------------------------
# (c) the result


def _accuracy(runner: PassRunner, spec: PassSpec, resampler: Resampler) -> Estimate:
    result = runner.run(spec)
    assert result.correct is not None
    return resampler.accuracy(result.correct, result.correct_by_group)


def _robustness(resampler: Resampler, clean: Estimate, shifted: Mapping[str, Estimate]) -> dict[str, Any]:
    """Accuracies and FS with their intervals (FS NaN with the reason where the clean accuracy is at chance)."""
    fs = {name: resampler.fragility(clean, e) for name, e in shifted.items()}
    undefined = {name: why for name, (_, why) in fs.items() if why is not None}
    out: dict[str, Any] = dict(clean_acc=clean.value, acc={n: e.value for n, e in shifted.items()},
                               fragility={n: e.value for n, (e, _) in fs.items()},
                               fragility_undefined=undefined or None)  # fmt: skip
    if resampler.boot is not None:
        out |= dict(clean_acc_ci=resampler.interval(clean),
                    fragility_ci={n: ci for n, (e, _) in fs.items() if (ci := resampler.interval(e)) is not None})
    return out


def _sweep(runner: PassRunner, plan: PassPlan, ssdc: SSDCLens, alphas: Sequence[float], at_one: SweepPoint,
           resampler: Resampler, estimates: dict[float, dict[str, Estimate]]) -> list[SweepPoint]:  # fmt: skip
    """The α sweep's points (RPI off for accuracy, on for ΔSSDC); α = 1 is the main result itself (``at_one``). The
    estimates of every point (for the trends along α) are put into ``estimates``."""
    sweep: list[SweepPoint] = []
    for a in alphas:
        if a == 1.0:
            sweep.append(at_one)
            continue
        point = plan.sweep[a]
        states = [runner.run(p).states[ssdc.name] for p in point.rpi]
        first2 = ssdc.rpi_curve(states)
        delta = resampler.delta(first2, ssdc.replicates(states))
        clean = _accuracy(runner, point.clean, resampler)
        shifted = {name: _accuracy(runner, p, resampler) for name, p in point.shifted.items()}
        numbers = _robustness(resampler, clean, shifted)
        sweep.append(SweepPoint(alpha=a, delta_ssdc=delta.value, ssdc_rpi=first2, delta_ssdc_ci=resampler.interval(delta),
                                **numbers))  # fmt: skip
        estimates[a] = _point_estimates(resampler, delta, clean, shifted)
    return sweep


def _point_estimates(resampler: Resampler, delta: Estimate, clean: Estimate,
                     shifted: Mapping[str, Estimate]) -> dict[str, Estimate]:  # fmt: skip
    out = {"delta_ssdc": delta, "clean_acc": clean}
    for name, e in shifted.items():
        out[f"fragility.{name}"] = resampler.fragility(clean, e)[0]
    return out


def _alpha_trends(estimates: Mapping[float, Mapping[str, Estimate]], edits: Sequence[Any],
                  boot: Any) -> dict[str, AlphaTrend] | None:  # fmt: skip
    """The trend of every measure along α (:func:`~peanchor.analysis.intervals.alpha_trend`), degenerate points
    excluded and named; None without a sweep."""
    if len(estimates) < 2 or 1.0 not in estimates:
        return None
    at_one = estimates[1.0]
    zeroed = any(getattr(e, "kind", None) == "pe_zero" for e in edits)
    excluded: dict[float, str] = {}
    for a, point in estimates.items():
        if a == 1.0:
            continue
        if zeroed:
            excluded[a] = "identical to α = 1 by construction: pe_zero removes what α scales"
        elif all(point[k].value == at_one[k].value or (math.isnan(point[k].value) and math.isnan(at_one[k].value))
                 for k in at_one):  # fmt: skip
            excluded[a] = "identical to α = 1: α does not reach this model"
    if zeroed:
        excluded[1.0] = "the only distinct point: pe_zero removes what α scales"
    return {key: alpha_trend({a: p[key] for a, p in estimates.items()}, excluded, boot) for key in at_one}


def _assemble(model: AnalysisInterface, evalset: EvalSet, applied: AnalysisPlan, plan: PassPlan, runner: PassRunner,
              lenses: Mapping[str, Lens], doses: tuple[Any, list[str]], *, device: torch.device,
              timing: dict[str, float], started: float, resolution: Any = None) -> AnalysisResult:  # fmt: skip
    """The :class:`AnalysisResult` of the passes ``runner`` ran for ``plan``."""
    # ---- the lenses (α = 1): the normal pass and the RPI draws
    records = {name: _record(lens, runner, plan.clean, plan.rpi) for name, lens in lenses.items()}
    dose_sweeps, dose_notes = doses
    notes = [f"{name}: {note}" for name, lens in lenses.items() for note in lens.notes] + dose_notes
    ssdc: SSDCLens = lenses[SSDCLens.name]  # type: ignore[assignment]
    ssdc_rpi = records[SSDCLens.name].rpi
    boot = ssdc.context.bootstrap
    chance = 1.0 / runner.num_classes if runner.num_classes else None
    resampler = Resampler(boot, len(evalset), chance)

    # ---- robustness (α = 1), with the intervals of the one resampling
    clean = _accuracy(runner, plan.clean, resampler)
    shifted = {name: _accuracy(runner, p, resampler) for name, p in plan.shifted.items()}
    numbers = _robustness(resampler, clean, shifted)
    rpi_acc = resampler.mean([_accuracy(runner, p, resampler) for p in plan.rpi])
    delta = resampler.delta(ssdc_rpi, ssdc.replicates([runner.run(p).states[ssdc.name] for p in plan.rpi]))
    sev_acc = {kind: [runner.accuracy(p) for p in passes] for kind, passes in plan.severities.items()}
    severities = applied.severities
    fs_defined = chance_reason(clean.value, numbers.get("clean_acc_ci"), chance) is None

    at_one = SweepPoint(alpha=1.0, delta_ssdc=delta.value, ssdc_rpi=ssdc_rpi[:2], delta_ssdc_ci=resampler.interval(delta),
                        **numbers)  # fmt: skip
    estimates = {1.0: _point_estimates(resampler, delta, clean, shifted)}
    sweep = _sweep(runner, plan, ssdc, applied.alphas, at_one, resampler, estimates)

    own_passes = _own_passes(lenses, applied.rpi_draws, applied.rpi_mode)
    count = len(plan.passes) + own_passes
    full = sum(1 for p in plan.passes if p.probes != "first2") + own_passes
    grid = tuple(int(g) for g in model.grid)
    return AnalysisResult(
        **numbers,
        rpi_acc=rpi_acc.value,
        rpi_acc_ci=resampler.interval(rpi_acc),
        delta_ssdc_ci=resampler.interval(delta),
        acc_ci={n: ci for n, e in shifted.items() if (ci := resampler.interval(e)) is not None} or None,
        ci_level=boot.level if boot is not None else None,
        chance=chance,
        lenses=records,
        delta_ssdc=delta.value,
        # accuracy (and FS) at severity 1..5, one list per kind
        severities=sev_acc if severities else None,
        severity_fragility={k: [fragility_score(clean.value, a) if fs_defined else math.nan for a in v]
                            for k, v in sev_acc.items()} if severities else None,
        severity_shifts={k: [p.shift.describe() for p in group if p.shift is not None]
                         for k, group in plan.severities.items()} if severities else None,
        severity_table=table_name(evalset.img_size) if severities else None,
        shifts={name: s.describe() for name, s in applied.shifts.items()},
        shift_sources=dict(applied.shift_sources) or None,
        alpha_sweep=sweep,
        alpha_trends=_alpha_trends(estimates, runner.edits, boot) if len(sweep) > 1 else None,
        num_images=len(evalset),
        forward_passes=count,
        passes={"full": full, "truncated": count - full, "truncated_layers": 2, "probe_rpi": own_passes},
        seconds=time.perf_counter() - started,
        timing=timing,
        model=ModelInfo(pe=model.pe_name, depth=int(model.depth), grid=list(grid), scalable=model.pe_scalable),
        settings=applied.settings_record(evalset.fingerprint, str(device)),
        environment=analysis_environment(str(device)),
        notes=notes or None,
        dose_sweeps=dose_sweeps, resolution=resolution,
    )  # fmt: skip


# ----------------------------------------------------------------------------------------------
# The suite


def evaluate_model(
    model: AnalysisInterface,
    evalset: EvalSet,
    plan: AnalysisPlan | None = None,
    *,
    info: Any = None,
    device: str | torch.device | None = None,
    progress: bool | None = None,
    cache: CorruptedCache | None = None,
) -> AnalysisResult:
    """Geometry, robustness and (for scalable PEs) the α sweep of ``model`` on ``evalset``, as ``plan`` says.

    Args:
        model: a ViT with the probe interface (see the module docstring); it is moved to ``device``
            and put in eval mode (its train/eval state is restored afterwards).
        evalset: the images, loaded once (``plan.max_images`` of them: the caller draws the subset).
        plan: the :class:`~peanchor.analysis.plan.AnalysisPlan`: the shifts (resolved for the images' size), the
            α sweep (skipped for PEs that are not ``scalable``), the RPI draws (SSDC under RPI is their mean ± std;
            draw ``k`` is seeded ``seed + k``, as are the bootstrap and the probe's split), the batch size, the
            severity sweeps (every measured kind, from the table for the images' resolution,
            :func:`~peanchor.analysis.shifts.severity_table`), the SSDC variant, the bootstrap, the position
            probe's ridge and held-out fraction, and the lenses to report. None: the defaults, with the
            resolution rule's shifts for the images' size.
        info: the dataset's ``DataInfo`` (mean/std for normalisation); default ``evalset.info``.
        cache: where corrupted sets are memoised; share one across models to corrupt only once.

    Returns:
        An :class:`~peanchor.results.records.AnalysisResult` whose ``settings`` record the plan as applied to this model.
        ``fragility`` is exactly ``1 - acc / clean_acc`` and ``delta_ssdc`` exactly ``rpi[1] - rpi[0]``.
    """
    started = time.perf_counter()
    model = _interface(model)
    info = info if info is not None else evalset.info
    if info is None:
        raise ConfigError("evaluate_model needs the dataset info (mean/std): pass info= or build the EvalSet with one")
    if plan is None:
        plan = resolve_plan(evalset.img_size)
    if not isinstance(plan, AnalysisPlan):
        raise ConfigError(f"evaluate_model(model, evalset, plan, *, info=...): plan must be an AnalysisPlan, got a "
                          f"{type(plan).__name__}")  # fmt: skip
    if evalset.img_size != getattr(info, "img_size", evalset.img_size):
        raise DataError(f"evaluation images are {evalset.img_size} px but the dataset info says {info.img_size} px")
    applied = plan.for_model(model.pe_scalable)
    # The severity sweeps: every measured kind, from the table for this resolution (each kind has one).
    kinds = list(dict.fromkeys(s.kind for s in applied.shifts.values()))
    passes = PassPlan.of(applied, severity_table(evalset.img_size, kinds) if applied.severities else {})
    dev = resolve_device(device)
    cache = cache if cache is not None else CorruptedCache(progress=progress)

    t_corrupt = time.perf_counter()
    sets = _corrupted_sets(evalset, passes.shifts, cache)
    t_corrupt = time.perf_counter() - t_corrupt
    lenses = measured_lenses(model, len(evalset), applied.settings(), chosen=applied.lenses,
                             options=applied.lens_options_typed())
    t_passes = time.perf_counter()
    runner = _run_passes(model, evalset, info, applied, passes, lenses, sets, dev, progress)
    # the dose-response sweeps (--sweep): their own passes, on the same images, lenses and fitted edits
    doses = _dose_sweeps(model, evalset, info, applied, sets, runner, lenses, dev, progress)
    resolution = measure_resolution(model, evalset, applied, runner, info, dev, progress)  # None: not asked for
    t_passes = time.perf_counter() - t_passes
    return _assemble(model, evalset, applied, passes, runner, lenses, doses, device=dev, resolution=resolution,
                     timing={"corrupt": t_corrupt, "passes": t_passes}, started=started)  # fmt: skip


def measure_lenses(
    model: AnalysisInterface,
    evalset: EvalSet,
    plan: AnalysisPlan,
    names: Sequence[str],
    *,
    info: Any = None,
    device: str | torch.device | None = None,
    progress: bool | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """The records of lenses ``names`` alone (and their notes), from the clean pass and the plan's RPI draws: what an
    analysis whose lenses failed measures again, without its accuracies, shifts or α sweep. The passes are those of
    :func:`evaluate_model` (the same seeds and batches), so a record comes out as it would have in the full analysis.
    """
    model = _interface(model)
    info = info if info is not None else evalset.info
    applied = plan.for_model(model.pe_scalable)
    every = measured_lenses(model, len(evalset), applied.settings(), chosen=applied.lenses,
                            options=applied.lens_options_typed())
    lenses = {n: lens for n, lens in every.items() if n in names}
    eager = any(lens.reads_attention for lens in every.values())  # the full analysis's passes read attention
    clean = PassSpec(None, 1.0, "all", None)
    rpi = [PassSpec(None, 1.0, "all", k) for k in range(applied.rpi_draws)]
    own = _own_passes(lenses, applied.rpi_draws, applied.rpi_mode)
    dev = resolve_device(device)
    was_training = model.training
    model.to(dev).eval()
    try:
        with progress_bar(total=(1 + len(rpi) + own) * math.ceil(len(evalset) / applied.batch_size), desc="lenses",
                          unit="batch", show=progress, leave=False) as bar:  # fmt: skip
            runner = PassRunner(model, evalset, info.mean, info.std, batch_size=applied.batch_size, device=dev,
                                seed=applied.seed, lenses=lenses, bar=bar,
                                edits=applied.interventions, eager_attention=eager,
                                rpi_mode=applied.rpi_mode, groups=_groups(lenses))  # fmt: skip
            for spec in (clean, *rpi):
                runner.run(spec)
    finally:
        model.train(was_training)
    records = {name: _record(lens, runner, clean, rpi) for name, lens in lenses.items()}
    return records, [f"{name}: {note}" for name, lens in lenses.items() for note in lens.notes]
