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
RPI draw k, per image      the lenses that ask for one permutation per image (probe)    every layer, no head
shift s, α = 1             top-1 under each shift (and each severity, on request)       ``layers=0``, the head
clean / shift s, α ≠ 1     the α sweep's accuracies (RPI off)                           ``layers=0``, the head
RPI draw k, α ≠ 1          ΔSSDC at α: only layers 0 and 1 are needed                   ``layers=2``, no head
========================== ============================================================ =========================

``forward_passes`` in the result counts these model calls over the whole set (a truncated
``layers=2`` pass counts as one too; ``passes`` in the result itemises them). Passes that
would repeat an identical computation (a severity equal to a main shift, α = 1 in the sweep) are
reused, not rerun.

The lenses (docs/lenses.md) are the plan's ``lenses`` (SSDC always) that apply to the model and the data (the
attention distance where the model hands out its attention weights, the probe with two images or more): each is fed
from the same full passes, and records the normal pass and the mean over RPI draws. A lens that fails (in a pass or
in its record) records a :class:`~peanchor.lenses.LensFailure` instead, and everything else is measured as usual;
what a lens notes of its measurement (a fallback it took) is the result's ``notes``. The position probe is fitted on
a split of the evaluation images drawn with ``seed`` (the same split in every pass) and scored on the rest; under RPI
it has a pass of its own, with one permutation per image (continuing the draw's generator after the draw's own pass):
a permutation shared by fit and held-out images would let the probe learn it from the content.

RPI draws one permutation of the patch tokens per forward call (i.e. per batch), shared by the
batch, from a ``torch.Generator`` seeded with ``seed + draw``. The same stream is used at every α,
so the sweep compares α values on identical permutations. Because a permutation is drawn per
batch, SSDC under RPI depends (slightly) on ``batch_size``; it is recorded in ``settings``.

Models only need the analysis interface (:class:`~peanchor.models.interface.AnalysisInterface`: ``grid``, ``depth``
and ``forward_intermediates``), plus ``pe.scalable`` (or a ``pe_scalable`` attribute) to say whether α means
anything. An adapter around a foreign model (a timm or transformers ViT) is therefore evaluated unchanged. The result
is an :class:`peanchor.results.AnalysisResult` (written as analysis.json by :func:`peanchor.results.write_analysis`).

Imports: :mod:`peanchor.analysis` (plan, shifts, evalset, passes, dose_sweep), :mod:`peanchor.lenses`,
:mod:`peanchor.metrics`, :mod:`peanchor.results`, :mod:`peanchor.interventions` (the plan's edits),
:mod:`peanchor.bars`, :mod:`peanchor.devices`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.dose_sweep import measure_dose_sweeps
from peanchor.analysis.plan import DEFAULT_ALPHAS, AnalysisPlan, resolve_plan
from peanchor.analysis.shifts import Shift, severity_table, table_name
from peanchor.bars import progress_bar
from peanchor.devices import resolve_device
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.passes import PassRunner, PassSpec, is_scalable
from peanchor.errors import ConfigError, DataError
from peanchor.interventions import Intervention
from peanchor.lenses import LENSES, Lens, LensContext, LensFailure
from peanchor.lenses.ssdc import mean_and_std
from peanchor.metrics import fragility_score
from peanchor.results import AnalysisResult, ModelInfo, SweepPoint

__all__ = ["DEFAULT_ALPHAS", "evaluate_model", "measure_lenses"]  # DEFAULT_ALPHAS: the plan's (peanchor.analysis.plan)


# ----------------------------------------------------------------------------------------------
# The suite


def _floats(t: Tensor | Sequence[float]) -> list[float]:
    return [float(v) for v in (t.tolist() if isinstance(t, Tensor) else t)]


def _delta(rpi: Sequence[float]) -> float:
    # Exactly rpi[1] - rpi[0] on the stored floats, so readers can check it to the last bit.
    return float(rpi[1]) - float(rpi[0]) if len(rpi) >= 2 else math.nan


def measured_lenses(model: nn.Module, num_images: int, settings: Mapping[str, Any],
                    chosen: Sequence[str] | None = None) -> dict[str, Lens]:  # fmt: skip
    """The lenses an analysis measures: the ``chosen`` ones (None: every registered lens) and the required ones, of
    those that apply to ``model`` on ``num_images`` images, built on one :class:`LensContext`."""
    context = LensContext(
        grid=tuple(int(g) for g in model.grid), num_prefix=int(getattr(model, "num_prefix", 1)),  # type: ignore[arg-type]
        depth=int(model.depth), num_images=num_images,
        has_attention_weights=bool(getattr(model, "has_attention_weights", False)), settings=dict(settings),
    )  # fmt: skip
    return {name: lens(context) for name, lens in LENSES.items()
            if (lens.required or chosen is None or name in chosen) and lens.applies(context)}  # fmt: skip


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


def evaluate_model(
    model: nn.Module,
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
        An :class:`~peanchor.results.AnalysisResult` whose ``settings`` record the plan as applied to this model.
        ``fragility`` is exactly ``1 - acc / clean_acc`` and ``delta_ssdc`` exactly ``rpi[1] - rpi[0]``.
    """
    t0 = time.perf_counter()
    info = info if info is not None else evalset.info
    if info is None:
        raise ConfigError("evaluate_model needs the dataset info (mean/std): pass info= or build the EvalSet with one")
    if plan is None:
        plan = resolve_plan(evalset.img_size)
    if not isinstance(plan, AnalysisPlan):
        raise ConfigError(f"evaluate_model(model, evalset, plan, *, info=...): plan must be an AnalysisPlan, got a "
                          f"{type(plan).__name__}")  # fmt: skip
    grid = tuple(int(g) for g in model.grid)
    if evalset.img_size != getattr(info, "img_size", evalset.img_size):
        raise DataError(f"evaluation images are {evalset.img_size} px but the dataset info says {info.img_size} px")
    scalable = is_scalable(model)
    applied = plan.for_model(scalable)
    alpha_list, shifts = list(applied.alphas), dict(applied.shifts)
    rpi_draws, seed, batch_size, severities = applied.rpi_draws, applied.seed, applied.batch_size, applied.severities
    # The severity sweeps: every measured kind, from the table for this resolution (each kind has one).
    kinds = list(dict.fromkeys(s.kind for s in shifts.values()))
    severity_shifts = severity_table(evalset.img_size, kinds) if severities else {}
    dev = resolve_device(device)
    cache = cache if cache is not None else CorruptedCache(progress=progress)

    # Corrupt every set once (CPU, memoised in the cache across models and α values).
    def key_of(shift: Shift) -> str:
        return json.dumps(shift.describe(), sort_keys=True)

    t_corrupt = time.perf_counter()
    sets: dict[str, Tensor] = {"clean": evalset.images}
    for shift in [*shifts.values(), *(s for group in severity_shifts.values() for s in group)]:
        if key_of(shift) not in sets:
            sets[key_of(shift)] = cache.get(evalset.images, shift, key=evalset.fingerprint)
    t_corrupt = time.perf_counter() - t_corrupt

    # Plan every pass up front: the progress bar knows its length, and duplicates collapse.
    clean = PassSpec("clean", 1.0, "all", None)
    rpi = [PassSpec("clean", 1.0, "all", k) for k in range(rpi_draws)]
    shifted = {name: PassSpec(key_of(s), 1.0, "none", None) for name, s in shifts.items()}
    severity_passes = {
        kind: [PassSpec(key_of(s), 1.0, "none", None) for s in group] for kind, group in severity_shifts.items()
    }
    sweep_alphas = [a for a in alpha_list if a != 1.0]
    sweep_passes = {
        a: (
            PassSpec("clean", a, "none", None),
            {name: PassSpec(key_of(s), a, "none", None) for name, s in shifts.items()},
            [PassSpec("clean", a, "first2", k) for k in range(rpi_draws)],
        )
        for a in sweep_alphas
    }
    passes: list[PassSpec] = [clean, *rpi, *shifted.values(), *(p for g in severity_passes.values() for p in g)]
    for a in sweep_alphas:
        c, s, r = sweep_passes[a]
        passes += [c, *s.values(), *r]
    passes = list(dict.fromkeys(passes))  # unique, in order
    batches_per_pass = math.ceil(len(evalset) / batch_size)
    lenses = measured_lenses(model, len(evalset), applied.settings(), chosen=applied.lenses)
    # a lens fed one permutation per image under RPI has a pass of its own under each RPI draw
    own_passes = rpi_draws if any(lens.rpi == "per_image" for lens in lenses.values()) else 0

    was_training = model.training
    model.to(dev).eval()
    t_passes = time.perf_counter()
    try:
        with progress_bar(total=(len(passes) + own_passes) * batches_per_pass, desc="evaluate", unit="batch",
                          show=progress, leave=False) as bar:  # fmt: skip
            runner = PassRunner(
                model, evalset, info.mean, info.std, sets=sets, batch_size=batch_size, device=dev, seed=seed,
                lenses=lenses, bar=bar, edits=Intervention.parse(applied.interventions).edits,
            )  # fmt: skip
            for spec in passes:
                bar.set_postfix_str(spec.label, refresh=False)
                runner.run(spec)
        # the dose-response sweeps (--sweep): their own passes, on the same images, lenses and fitted edits
        dose_sweeps, dose_notes = measure_dose_sweeps(
            model, evalset, applied, sets={"clean": evalset.images, **{n: sets[key_of(s)] for n, s in shifts.items()}},
            lenses=lenses, base=runner.edits, mean=info.mean, std=info.std, device=dev, progress=progress,
        ) if applied.sweeps else (None, [])  # fmt: skip
    finally:
        model.train(was_training)
    t_passes = time.perf_counter() - t_passes

    # ---- the lenses (α = 1): the normal pass and the RPI draws
    records = {name: _record(lens, runner, clean, rpi) for name, lens in lenses.items()}
    notes = [f"{name}: {note}" for name, lens in lenses.items() for note in lens.notes] + dose_notes
    ssdc_rpi = records["ssdc"].rpi

    # ---- robustness (α = 1)
    clean_acc = runner.accuracy(clean)
    acc = {name: runner.accuracy(p) for name, p in shifted.items()}
    fragility = {name: fragility_score(clean_acc, a) for name, a in acc.items()}
    sev_acc = {kind: [runner.accuracy(p) for p in passes] for kind, passes in severity_passes.items()}

    # ---- α sweep (RPI off for accuracy, on for ΔSSDC); α = 1 is the main result itself
    sweep: list[SweepPoint] = []
    for a in alpha_list:
        if a == 1.0:
            sweep.append(SweepPoint(alpha=1.0, delta_ssdc=_delta(ssdc_rpi), ssdc_rpi=ssdc_rpi[:2], clean_acc=clean_acc,
                                    acc=dict(acc), fragility=dict(fragility)))  # fmt: skip
            continue
        c, sh, r = sweep_passes[a]
        first2, _ = mean_and_std([_floats(runner.run(p).states["ssdc"].compute()) for p in r])
        ca = runner.accuracy(c)
        sa = {name: runner.accuracy(p) for name, p in sh.items()}
        sweep.append(SweepPoint(alpha=a, delta_ssdc=_delta(first2), ssdc_rpi=first2, clean_acc=ca, acc=sa,
                                fragility={name: fragility_score(ca, v) for name, v in sa.items()}))  # fmt: skip

    full = sum(1 for p in passes if p.probes != "first2") + own_passes
    return AnalysisResult(
        clean_acc=clean_acc,
        rpi_acc=float(np.mean([runner.accuracy(p) for p in rpi])),
        lenses=records,
        delta_ssdc=_delta(ssdc_rpi),
        acc=acc,
        fragility=fragility,
        # accuracy (and FS) at severity 1..5, one list per kind
        severities=sev_acc if severities else None,
        severity_fragility={k: [fragility_score(clean_acc, a) for a in v] for k, v in sev_acc.items()} if severities else None,
        severity_shifts={k: [s.describe() for s in group] for k, group in severity_shifts.items()} if severities else None,
        severity_table=table_name(evalset.img_size) if severities else None,
        shifts={name: s.describe() for name, s in shifts.items()},
        shift_sources=dict(applied.shift_sources) or None,
        alpha_sweep=sweep,
        num_images=len(evalset),
        forward_passes=len(passes) + own_passes,
        passes={"full": full, "truncated": len(passes) + own_passes - full, "truncated_layers": 2,
                "probe_rpi": own_passes},
        seconds=time.perf_counter() - t0,
        timing={"corrupt": t_corrupt, "passes": t_passes},
        model=ModelInfo(pe=getattr(model, "pe_name", None), depth=int(model.depth), grid=list(grid), scalable=scalable),
        settings=applied.settings_record(evalset.fingerprint, str(dev)),
        notes=notes or None,
        dose_sweeps=dose_sweeps,
    )  # fmt: skip


def measure_lenses(
    model: nn.Module,
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
    info = info if info is not None else evalset.info
    applied = plan.for_model(is_scalable(model))
    every = measured_lenses(model, len(evalset), applied.settings(), chosen=applied.lenses)
    lenses = {n: lens for n, lens in every.items() if n in names}
    eager = any(lens.reads_attention for lens in every.values())  # the full analysis's passes read attention
    clean = PassSpec("clean", 1.0, "all", None)
    rpi = [PassSpec("clean", 1.0, "all", k) for k in range(applied.rpi_draws)]
    own = applied.rpi_draws if any(lens.rpi == "per_image" for lens in lenses.values()) else 0
    dev = resolve_device(device)
    was_training = model.training
    model.to(dev).eval()
    try:
        with progress_bar(total=(1 + len(rpi) + own) * math.ceil(len(evalset) / applied.batch_size), desc="lenses",
                          unit="batch", show=progress, leave=False) as bar:  # fmt: skip
            runner = PassRunner(model, evalset, info.mean, info.std, sets={"clean": evalset.images},
                                batch_size=applied.batch_size, device=dev, seed=applied.seed, lenses=lenses, bar=bar,
                                edits=Intervention.parse(applied.interventions).edits, eager_attention=eager)  # fmt: skip
            for spec in (clean, *rpi):
                runner.run(spec)
    finally:
        model.train(was_training)
    records = {name: _record(lens, runner, clean, rpi) for name, lens in lenses.items()}
    return records, [f"{name}: {note}" for name, lens in lenses.items() for note in lens.notes]
