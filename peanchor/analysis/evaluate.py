"""The evaluation suite: geometry (SSDC, ΔSSDC, attention distance, the position probe), robustness (accuracy,
Fragility Score) and the α sweep.

Everything is measured from as few passes over the evaluation set as possible, and geometry comes
out of the same passes as accuracy:

========================== ============================================================ ==========
pass                       yields                                                       model call
========================== ============================================================ ==========
clean, α = 1               clean top-1 and the three lenses per layer (RPI off)         forward_with_tokens
RPI draw k, α = 1          SSDC and attention distance per layer under RPI, RPI top-1   forward_with_tokens
RPI draw k, probe          the position probe under RPI (one permutation per image)     forward_with_tokens
shift s, α = 1             top-1 under each shift (and each severity, on request)       forward
clean / shift s, α ≠ 1     the α sweep's accuracies (RPI off)                           forward
RPI draw k, α ≠ 1          ΔSSDC at α: only probes 0 and 1 are needed                   spatial_tokens(num_layers=2)
========================== ============================================================ ==========

``forward_passes`` in the result counts these model calls over the whole set (a truncated
``num_layers=2`` pass counts as one too; ``passes`` in the result itemises them). Passes that
would repeat an identical computation (a severity equal to a main shift, α = 1 in the sweep) are
reused, not rerun.

The three lenses (docs/lenses.md) come from the same full passes: SSDC, the mean attention distance per layer
and head (where the model hands out its attention weights) and the position-decoding probe, fitted on a split
of the evaluation images drawn with ``seed`` (the same split in every pass) and scored on the rest. Under RPI the
probe has a pass of its own, with one permutation per image (continuing the draw's generator after the draw's
own pass): a permutation shared by fit and held-out images would let the probe learn it from the content.

RPI draws one permutation of the patch tokens per forward call (i.e. per batch), shared by the
batch, from a ``torch.Generator`` seeded with ``seed + draw``. The same stream is used at every α,
so the sweep compares α values on identical permutations. Because a permutation is drawn per
batch, SSDC under RPI depends (slightly) on ``batch_size``; it is recorded in ``settings``.

Models only need the probe interface of :class:`peanchor.models.VisionTransformer`: ``grid``,
``depth``, ``forward(x, token_perm, pe_scale)``, ``forward_with_tokens(...)`` and
``spatial_tokens(..., num_layers=)``, plus ``pe.scalable`` (or a ``pe_scalable`` attribute) to
say whether α means anything. An adapter around a foreign model (e.g. a timm ViT) can therefore be
evaluated unchanged. The result is an :class:`peanchor.results.AnalysisResult` (written as analysis.json by
:func:`peanchor.results.write_analysis`).

Imports: :mod:`peanchor.analysis` (plan, shifts, evalset, passes), :mod:`peanchor.metrics`, :mod:`peanchor.results`.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.plan import DEFAULT_ALPHAS, AnalysisPlan, resolve_plan
from peanchor.analysis.shifts import Shift, severity_table, table_name
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.lenses import LensPlan
from peanchor.analysis.passes import PassRunner, PassSpec, is_scalable
from peanchor.errors import ConfigError, DataError
from peanchor.metrics import SSDCAccumulator, fragility_score
from peanchor.results import AnalysisResult, ModelInfo, SSDCLayers, SweepPoint

__all__ = ["DEFAULT_ALPHAS", "evaluate_model"]  # DEFAULT_ALPHAS: the plan's (peanchor.analysis.plan)

CI_LEVEL = 0.95


# ----------------------------------------------------------------------------------------------
# The suite


def _floats(t: Tensor | Sequence[float]) -> list[float]:
    return [float(v) for v in (t.tolist() if isinstance(t, Tensor) else t)]


def _delta(rpi: Sequence[float]) -> float:
    # Exactly rpi[1] - rpi[0] on the stored floats, so readers can check it to the last bit.
    return float(rpi[1]) - float(rpi[0]) if len(rpi) >= 2 else math.nan


def _mean_over_draws(values: list[list[float]]) -> tuple[list[float], list[float]]:
    """Per-layer mean and sample std (ddof=1; 0.0 with a single draw) over RPI draws."""
    arr = np.asarray(values, dtype=np.float64)  # (K, L)
    mean = arr.mean(axis=0)
    std = arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1])
    return _floats(mean), _floats(std)


def _resolve_device(device: str | torch.device | None) -> torch.device:
    if device is None or str(device) == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


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
    ssdc_mode, metric, bootstrap = applied.ssdc_mode, applied.metric, applied.bootstrap
    probe_ridge, probe_holdout = applied.probe_ridge, applied.probe_holdout
    # The severity sweeps: every measured kind, from the table for this resolution (each kind has one).
    kinds = list(dict.fromkeys(s.kind for s in shifts.values()))
    severity_shifts = severity_table(evalset.img_size, kinds) if severities else {}
    dev = _resolve_device(device)
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
    lenses = LensPlan.for_model(model, len(evalset), seed=seed, ridge=probe_ridge, holdout=probe_holdout)
    probe_passes = rpi_draws if lenses.heldout is not None else 0  # the probe's own pass under each RPI draw

    def make_accumulator() -> SSDCAccumulator:
        return SSDCAccumulator(grid, metric=metric, mode=ssdc_mode, bootstrap=bootstrap, seed=seed)

    was_training = model.training
    model.to(dev).eval()
    t_passes = time.perf_counter()
    try:
        with tqdm(total=(len(passes) + probe_passes) * batches_per_pass, desc="evaluate", unit="batch", disable=None if progress is None else not progress,
                  leave=False) as bar:  # fmt: skip
            runner = PassRunner(
                model, evalset, info.mean, info.std, sets=sets, batch_size=batch_size, device=dev, seed=seed,
                make_accumulator=make_accumulator, bar=bar, lenses=lenses,
            )  # fmt: skip
            for spec in passes:
                bar.set_postfix_str(spec.label, refresh=False)
                runner.run(spec)
    finally:
        model.train(was_training)
    t_passes = time.perf_counter() - t_passes

    # ---- geometry (α = 1)
    normal_acc = runner.run(clean).accumulator
    assert normal_acc is not None
    rpi_values = [_floats(runner.run(p).accumulator.compute()) for p in rpi]  # type: ignore[union-attr]
    ssdc_rpi, ssdc_rpi_std = _mean_over_draws(rpi_values)
    ssdc = SSDCLayers(normal=_floats(normal_acc.compute()), rpi=ssdc_rpi, rpi_std=ssdc_rpi_std,
                      rpi_draws=rpi_values if rpi_draws > 1 else None)  # fmt: skip
    if bootstrap:  # [[low per layer], [high per layer]]; under RPI, of the first draw
        bounds = [normal_acc.confidence_interval(CI_LEVEL), runner.run(rpi[0]).accumulator.confidence_interval(CI_LEVEL)]  # type: ignore[union-attr]
        ssdc.normal_ci, ssdc.rpi_ci = ([_floats(low), _floats(high)] for low, high in bounds)
        ssdc.ci_level = CI_LEVEL
    attention_distance = lenses.attention_layers(runner.run(clean).attention, [runner.run(p).attention for p in rpi])
    position_probe = lenses.probe_layers(runner.run(clean).position, [runner.run(p).position for p in rpi])

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
        first2, _ = _mean_over_draws([_floats(runner.run(p).accumulator.compute()) for p in r])  # type: ignore[union-attr]
        ca = runner.accuracy(c)
        sa = {name: runner.accuracy(p) for name, p in sh.items()}
        sweep.append(SweepPoint(alpha=a, delta_ssdc=_delta(first2), ssdc_rpi=first2, clean_acc=ca, acc=sa,
                                fragility={name: fragility_score(ca, v) for name, v in sa.items()}))  # fmt: skip

    full = sum(1 for p in passes if p.probes != "first2") + probe_passes
    return AnalysisResult(
        clean_acc=clean_acc,
        rpi_acc=float(np.mean([runner.accuracy(p) for p in rpi])),
        ssdc=ssdc,
        delta_ssdc=_delta(ssdc_rpi),
        acc=acc,
        fragility=fragility,
        # accuracy (and FS) at severity 1..5, one list per kind
        severities=sev_acc if severities else None,
        severity_fragility={k: [fragility_score(clean_acc, a) for a in v] for k, v in sev_acc.items()} if severities else None,
        severity_shifts={k: [s.describe() for s in group] for k, group in severity_shifts.items()} if severities else None,
        severity_table=table_name(evalset.img_size) if severities else None,
        # the lenses the plan does not report are measured all the same (the passes cannot skip them yet)
        attention_distance=attention_distance if "attention_distance" in applied.lenses else None,
        position_probe=position_probe if "position_probe" in applied.lenses else None,
        shifts={name: s.describe() for name, s in shifts.items()},
        shift_sources=dict(applied.shift_sources) or None,
        alpha_sweep=sweep,
        num_images=len(evalset),
        forward_passes=len(passes) + probe_passes,
        passes={"full": full, "truncated": len(passes) + probe_passes - full, "truncated_layers": 2,
                "probe_rpi": probe_passes},
        seconds=time.perf_counter() - t0,
        timing={"corrupt": t_corrupt, "passes": t_passes},
        model=ModelInfo(pe=getattr(model, "pe_name", None), depth=int(model.depth), grid=list(grid), scalable=scalable),
        settings=applied.settings_record(evalset.fingerprint, str(dev)),
    )  # fmt: skip
