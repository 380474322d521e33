"""Which of the study's claims a set of results replicates: each claim of the paper as a check on intervals.

The paper states its findings in words ("collapses under shuffling", "less fragile", ...). Each is checked here
against a fixed threshold, the same for every run and preset, and read from an *interval*
(:mod:`peanchor.report.evidence`): at n = 1 seed the analysis's own bootstrap interval (a verdict about these
trained models), from n = 2 seeds the t-interval over seeds. The verdict is *replicates* when the interval clears
the threshold on the claim's side, *does not replicate* when it lies wholly on the other side, and
*inconclusive* otherwise (or when there is no interval: a file from before intervals were recorded).

=================  =========================================================================================
claim              replicates when (conditions absent from the results are left out; none present: not measured)
=================  =========================================================================================
content_driven     ``none`` and ``rpt``: SSDC under RPI inside ±NEAR_ZERO at every layer, and SSDC with the tokens in
                   order above GHOST_MAP at some layer (a content-driven "ghost map")
index_anchored     ``ape``, ``sincos``, ``rope``: SSDC under RPI ≥ ANCHORED at some layer ("anchored")
early_peak         ``ape``, ``sincos``: anchored, and a layer of the first half of the network above every layer of
                   the second half (its interval's low end above their high ends)
gradual_build_up   ``rope``: anchored, and SSDC under RPI of the last layer ≥ layer 0's + BUILD_UP
less_fragile       at every shift, FS(base) − FS(PE model) ≥ FS_MARGIN for each PE model and each of ``none``,
                   ``rpt`` (FS undefined: inconclusive, with the reason)
alpha_sweep        the APE's trend along α (``alpha_trends``, per seed, then over seeds): ΔSSDC's slope > 0, and
                   FS's slope < 0 at every shift; degenerate α points are excluded and named
delta_fs           over the independent trained models at α = 1 (at least MIN_POINTS; FS undefined or clean
                   accuracy at chance: left out and named): the interval of Spearman's ρ(ΔSSDC, FS) below 0
=================  =========================================================================================

No p-value is computed from points that are not independent samples: α points of one model are one sample, so
the trend along α is read from its own interval and ``delta_fs`` uses one point per trained model. Spearman's ρ
gets a Fisher-z interval with the Bonett–Wright standard error √((1 + ρ²/2)/(n − 3)).

The thresholds are ours, not the paper's (it gives curves, not cut-offs); docs/study.md explains them.

Imports: :mod:`peanchor.results.records`, :mod:`peanchor.report.summary`, :mod:`peanchor.report.evidence`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from peanchor.report.evidence import (
    DOES_NOT_REPLICATE,
    INCONCLUSIVE,
    NOT_MEASURED,
    REPLICATES,
    Interval,
    all_of,
    any_of,
    at_least,
    at_most,
    difference,
    fs_estimate,
    layer_estimates,
    over_seeds,
    within,
)
from peanchor.report.summary import finite, fmt, models_by_condition, primary_shift, shift_keys
from peanchor.results.records import ModelResult, Results, SweepRow

__all__ = [
    "ANCHORED",
    "BUILD_UP",
    "FS_MARGIN",
    "GHOST_MAP",
    "MIN_POINTS",
    "NEAR_ZERO",
    "SWEEP_MIN_ACC",
    "Claim",
    "check_claims",
    "claims_scope",
    "model_correlation",
]

NEAR_ZERO = 0.10  # |SSDC| under RPI that counts as "no index-anchored structure"
GHOST_MAP = 0.20  # SSDC with tokens in order that counts as content-driven structure
ANCHORED = 0.25  # SSDC under RPI that counts as index-anchored structure
BUILD_UP = 0.10  # how much RoPE's SSDC under RPI must rise from layer 0 to the last layer
FS_MARGIN = 0.05  # how much lower a PE model's FS must be than the ablated and RPT models'
SWEEP_MIN_ACC = 0.20  # α points below this clean accuracy (older files without `chance`) are too broken to read
MIN_POINTS = 5  # the fewest independent models a rank correlation's interval is read from

_NO_PE = ("none", "rpt")
_PE = ("ape", "sincos", "rope")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and what these results say of it: ``verdict`` is one of ``replicates``,
    ``does not replicate``, ``inconclusive`` or ``not measured``; ``evidence`` shows the intervals."""

    key: str
    title: str
    statement: str
    verdict: str
    evidence: str

    @property
    def replicates(self) -> bool | None:
        """True / False for a decided verdict, None when inconclusive or not measured."""
        return {REPLICATES: True, DOES_NOT_REPLICATE: False}.get(self.verdict)


def claims_scope(results: Results) -> str:
    """What the intervals behind the verdicts are over: one sentence for the report."""
    seeds = [len(ms) for ms in models_by_condition(results).values()]
    if not seeds:
        return "No models: no claims."
    if max(seeds) == 1:
        return ("n = 1 seed per condition: each interval is the analysis's bootstrap interval (over images, and over "
                "permutations under RPI), so a verdict is about these trained models; how another seed would "
                "differ is not in it.")  # fmt: skip
    few = min(seeds)
    text = "Intervals are 95% t-intervals of the mean over seeds, so seed-to-seed variation is in them"
    return text + (f"; a condition with one seed uses its analysis's bootstrap interval instead (n = {few})."
                   if few == 1 else ".")  # fmt: skip


def _at(iv: Interval, layer: int) -> str:
    return f"layer {layer}: {iv.text()}"


def _peak(layers: Sequence[Interval]) -> int:
    return max(range(len(layers)), key=lambda i: layers[i].value if finite(layers[i].value) else -math.inf)


def _content_driven(groups: dict[str, list[ModelResult]]) -> tuple[str, str]:
    parts, verdicts = [], []
    for c in (c for c in _NO_PE if c in groups):
        rpi, normal = layer_estimates(groups[c], "rpi"), layer_estimates(groups[c], "normal")
        flat = all_of([within(iv, -NEAR_ZERO, NEAR_ZERO) for iv in rpi])
        ghost = any_of([at_least(iv, GHOST_MAP, strict=True) for iv in normal])
        verdicts.append(all_of([flat, ghost]))
        far = max(range(len(rpi)), key=lambda i: abs(rpi[i].value) if finite(rpi[i].value) else -math.inf)
        parts.append(f"`{c}`: largest |SSDC| under RPI at {_at(rpi[far], far)} ({flat} for ±{NEAR_ZERO:.2f}); in "
                     f"order, highest at {_at(normal[_peak(normal)], _peak(normal))} ({ghost} for "
                     f"> {GHOST_MAP:.2f})")  # fmt: skip
    return all_of(verdicts), "; ".join(parts)


def _anchored(models: list[ModelResult]) -> tuple[str, str]:
    """Whether a condition is anchored at all (some layer's SSDC under RPI ≥ ANCHORED by its interval)."""
    rpi = layer_estimates(models, "rpi")
    top = _peak(rpi)
    return any_of([at_least(iv, ANCHORED) for iv in rpi]), f"peak under RPI at {_at(rpi[top], top)}"


def _index_anchored(groups: dict[str, list[ModelResult]]) -> tuple[str, str]:
    found = {c: _anchored(groups[c]) for c in _PE if c in groups}
    evidence = "; ".join(f"`{c}`: {text} ({verdict})" for c, (verdict, text) in found.items())
    return all_of([v for v, _ in found.values()]), evidence


def _peak_position(rpi: list[Interval]) -> str:
    """The peak lies in the first half: some first-half layer's interval above every second-half layer's."""
    if len(rpi) < 2 or not all(iv.bounded for iv in rpi):
        return INCONCLUSIVE
    half = (len(rpi) + 1) // 2
    first, second = rpi[:half], rpi[half:]
    if any(all(a.low > b.high for b in second) for a in first):
        return REPLICATES
    return DOES_NOT_REPLICATE if any(all(b.low > a.high for a in first) for b in second) else INCONCLUSIVE


def _early_peak(groups: dict[str, list[ModelResult]]) -> tuple[str, str]:
    parts, verdicts = [], []
    for c in (c for c in ("ape", "sincos") if c in groups):
        anchored, text = _anchored(groups[c])
        if anchored == DOES_NOT_REPLICATE:  # no anchored structure, so no anchored peak to place
            verdicts.append(DOES_NOT_REPLICATE)
            parts.append(f"`{c}` is not anchored ({text}, below {ANCHORED:.2f}): the condition is not met")
            continue
        position = _peak_position(layer_estimates(groups[c], "rpi"))
        verdicts.append(all_of([anchored, position]))
        depth = len(groups[c][0].ssdc.rpi)
        parts.append(f"`{c}`: {text} of layers 0–{depth - 1} (anchored: {anchored}; peak in the first half: "
                     f"{position})")  # fmt: skip
    return all_of(verdicts), "; ".join(parts)


def _gradual_build_up(groups: dict[str, list[ModelResult]]) -> tuple[str, str]:
    if "rope" not in groups:
        return NOT_MEASURED, "no `rope` model"
    models = groups["rope"]
    anchored, text = _anchored(models)
    if len(models) >= 2:
        rise = over_seeds([m.ssdc.rpi[-1] - m.ssdc.rpi[0] for m in models])
    else:
        rpi = layer_estimates(models, "rpi")
        rise = difference(rpi[-1], rpi[0])
    built = at_least(rise, BUILD_UP)
    return all_of([anchored, built]), (f"`rope`: {text} (anchored: {anchored}); last − first layer under RPI "
                                       f"{rise.text(signed=True)} ({built} for ≥ {BUILD_UP:.2f})")  # fmt: skip


def _fs_gap(base: list[ModelResult], pe: list[ModelResult], shift: str) -> Interval:
    """FS(base) − FS(pe) at ``shift``: over seeds paired by seed from 2 pairs on, else the two intervals' ends."""
    by_seed = {m.seed: m for m in base}
    pairs = [(by_seed[m.seed], m) for m in pe if m.seed in by_seed]
    fs_b, fs_p = fs_estimate(base, shift), fs_estimate(pe, shift)
    if fs_b.undefined or fs_p.undefined:
        return difference(fs_b, fs_p)
    def ok(m: ModelResult) -> bool:
        return finite(m.fragility.get(shift)) and not (m.fragility_undefined or {}).get(shift)

    defined = [(b, p) for b, p in pairs if ok(b) and ok(p)]
    if len(defined) >= 2:
        return over_seeds([b.fragility[shift] - p.fragility[shift] for b, p in defined])
    return difference(fs_b, fs_p)


def _less_fragile(results: Results, groups: dict[str, list[ModelResult]]) -> tuple[str, str]:
    pes, bases = [c for c in _PE if c in groups], [c for c in _NO_PE if c in groups]
    if not pes or not bases:
        return NOT_MEASURED, "needs a PE model and `none` or `rpt`"
    parts, verdicts = [], []
    for k in shift_keys(results):
        fs = {c: fs_estimate(groups[c], k) for c in bases + pes}
        gaps = {(b, p): _fs_gap(groups[b], groups[p], k) for b in bases for p in pes}
        verdict = all_of([at_least(g, FS_MARGIN) for g in gaps.values()])
        verdicts.append(verdict)
        notes = [f"{c}: {iv.note}" for c, iv in fs.items() if iv.note]
        parts.append(f"{k} ({verdict}): FS " + ", ".join(f"`{c}` {iv.text()}" for c, iv in fs.items())
                     + "; gaps " + ", ".join(f"{b} − {p} {g.text(signed=True)}" for (b, p), g in gaps.items())
                     + (f" ({'; '.join(notes)})" if notes else ""))  # fmt: skip
    return all_of(verdicts), "; ".join(parts)


def _at_chance(clean: float, chance: float | None) -> bool:
    return clean < SWEEP_MIN_ACC if chance is None else clean <= chance


def _fallback_trend(rows: list[SweepRow], name: str, chance: float | None) -> tuple[Interval, dict[str, str]]:
    """An older file without ``alpha_trends``: the least-squares slope over the usable points, no interval."""
    why = "at chance" if chance is not None else f"below {SWEEP_MIN_ACC:.2f}, too low to read FS"
    excluded = {f"{p.alpha:g}": f"clean accuracy {fmt(p.clean_acc, 2)} {why}"
                for p in rows if not finite(p.clean_acc) or _at_chance(p.clean_acc, chance)}  # fmt: skip
    usable = [p for p in rows if f"{p.alpha:g}" not in excluded]
    get = (lambda p: p.delta_ssdc) if name == "delta_ssdc" else (lambda p: p.fragility.get(name.split(".", 1)[1]))
    xy = [(p.alpha, get(p)) for p in usable if finite(get(p))]
    if len(xy) < 3:
        return Interval(math.nan, n=0), excluded
    slope = float(np.polyfit([x for x, _ in xy], [y for _, y in xy], 1)[0])
    return Interval(slope), excluded


def _identical(rows: list[SweepRow]) -> bool:
    """Every α point of a model gives the same numbers: α does not reach the model (e.g. under pe_zero)."""
    keys = {(p.delta_ssdc, p.clean_acc, tuple(sorted(p.fragility.items()))) for p in rows}
    return len(rows) > 1 and len(keys) == 1


def _trend(models: list[ModelResult], rows: list[SweepRow], name: str) -> tuple[Interval, list[str]]:
    """A condition's trend ``name`` along α: per model (its ``alpha_trends``), over seeds from 2 models on."""
    per_model, notes = [], []
    for m in models:
        own = [p for p in rows if p.model == m.name]
        if _identical(own):
            notes.append(f"{m.name}: every α point excluded, identical by construction (α does not reach the model)")
            continue
        trend = (m.alpha_trends or {}).get(name)
        if trend is not None:  # the analysis's own trend: its slope and interval, and the α points it left out
            slope, ci = trend.slope, trend.ci or [None, None]
            low, high = (float(ci[0]), float(ci[1])) if all(finite(v) for v in ci[:2]) else (math.nan, math.nan)
            iv = Interval(float(slope) if finite(slope) else math.nan, low, high, "images" if finite(low) else "")
            excluded = trend.excluded
        else:
            iv, excluded = _fallback_trend(own, name, m.chance)
        notes += [f"{m.name} α = {a}: {why}" for a, why in (excluded or {}).items()]
        per_model.append(iv)
    finite_slopes = [iv for iv in per_model if finite(iv.value)]
    if len(finite_slopes) >= 2:
        return over_seeds([iv.value for iv in finite_slopes]), notes
    return (finite_slopes[0] if finite_slopes else Interval(math.nan, n=0)), notes


def _alpha_sweep(results: Results, groups: dict[str, list[ModelResult]]) -> tuple[str, str]:
    rows = [p for p in results.alpha_sweep if p.condition == "ape"]
    models = [m for m in groups.get("ape", []) if any(p.model == m.name for p in rows)]
    if not models:
        return NOT_MEASURED, "no α sweep of an `ape` model"
    delta, notes = _trend(models, rows, "delta_ssdc")
    if not finite(delta.value):
        every = all(_identical([p for p in rows if p.model == m.name]) for m in models)
        why = "every α point excluded" if every else "fewer than 3 usable α points, no trend to read"
        return NOT_MEASURED if every else INCONCLUSIVE, f"{why}: " + "; ".join(dict.fromkeys(notes))
    verdicts, parts = [at_least(delta, 0.0, strict=True)], [f"slope of ΔSSDC along α {delta.text(3, True)}"]
    for k in shift_keys(results):
        fs, more = _trend(models, rows, f"fragility.{k}")
        notes += more
        verdicts.append(at_most(fs, 0.0, strict=True))
        parts.append(f"of FS {k} {fs.text(3, True)}")
    text = ", ".join(parts)
    excluded = list(dict.fromkeys(notes))
    return all_of(verdicts), text + (f"; excluded: {'; '.join(excluded)}" if excluded else "")


def _spearman_interval(x: Sequence[float], y: Sequence[float]) -> Interval:
    """Spearman's ρ with a 95% Fisher-z interval (Bonett–Wright standard error); n ≥ 4."""
    if len(set(x)) < 2 or len(set(y)) < 2:  # ρ is undefined for a constant variable
        return Interval(math.nan, n=len(x), undefined="constant values")
    rho = float(stats.spearmanr(x, y).statistic)
    if not finite(rho):
        return Interval(math.nan, n=len(x), undefined="constant values")
    z, half = math.atanh(max(-0.999999, min(0.999999, rho))), 1.96 * math.sqrt((1 + rho**2 / 2) / (len(x) - 3))
    return Interval(rho, math.tanh(z - half), math.tanh(z + half), "models", len(x))


def model_correlation(results: Results) -> tuple[str | None, Interval, list[str]]:
    """Spearman's ρ(ΔSSDC, FS) over the trained models at α = 1 (one independent point each) at the primary shift,
    with its interval (None below MIN_POINTS models), and what was left out: ``(shift, ρ, left out)``."""
    shift = primary_shift(results)
    used, left = [], []
    for m in results.models if shift is not None else []:
        reason = (m.fragility_undefined or {}).get(shift)
        if reason or not finite(m.fragility.get(shift)):
            left.append(f"{m.name}: FS undefined ({reason or 'not a number'})")
        elif m.chance is not None and finite(m.clean_acc) and m.clean_acc <= m.chance:
            left.append(f"{m.name}: clean accuracy {fmt(m.clean_acc, 2)} at chance")
        elif finite(m.delta_ssdc):
            used.append(m)
    if len(used) < MIN_POINTS:
        return shift, Interval(math.nan, n=len(used)), left
    return shift, _spearman_interval([m.delta_ssdc for m in used], [m.fragility[shift] for m in used]), left


def _delta_fs(results: Results) -> tuple[str, str]:
    shift, rho, left = model_correlation(results)
    if shift is None or not results.models:
        return NOT_MEASURED, "no shift measured"
    note = f"; left out: {'; '.join(left)}" if left else ""
    if rho.n < MIN_POINTS:
        return INCONCLUSIVE, f"{rho.n} trained model(s), fewer than {MIN_POINTS}: too few for an interval{note}"
    return at_most(rho, 0.0, strict=True), (f"Spearman ρ(ΔSSDC, FS {shift}) = {rho.text(2, True)} over {rho.n} "
                                            f"trained models at α = 1{note}")  # fmt: skip


_STATEMENTS = {
    "content_driven": ("Content-driven structure without a PE",
                       f"Without a positional encoding (and with RPT) the spatial structure is content-driven: SSDC "
                       f"with the tokens in order exceeds {GHOST_MAP:.2f} at some layer, and under RPI it stays within "
                       f"±{NEAR_ZERO:.2f} at every layer."),
    "index_anchored": ("Positional encodings anchor the structure",
                       f"Every positional encoding anchors the structure to the token indices: its SSDC under RPI "
                       f"reaches {ANCHORED:.2f} at some layer."),
    "early_peak": ("Absolute encodings peak early",
                   "The absolute encodings (APE, sin-cos) are anchored from the start: they are anchored at all, and "
                   "their SSDC under RPI peaks in the first half of the layers."),
    "gradual_build_up": ("RoPE builds up with depth",
                         f"RoPE builds its anchored structure up with depth: it is anchored, and its last layer's SSDC "
                         f"under RPI is at least {BUILD_UP:.2f} above layer 0's."),
    "less_fragile": ("Positional encodings make models less fragile",
                     f"Positional encodings make the model less fragile: at every shift, each PE model's FS is at "
                     f"least {FS_MARGIN:.2f} below both the ablated model's and RPT's."),
    "alpha_sweep": ("Scaling the APE down",
                    "Scaling the learned APE down (α < 1) removes anchored structure and makes the model more fragile: "
                    "along α, ΔSSDC rises and FS falls (the slopes' intervals)."),
    "delta_fs": ("More anchoring, less fragility",
                 "More index-anchored structure goes with less fragility: over the trained models, ΔSSDC and FS "
                 "rank-correlate negatively (the interval of Spearman's ρ below 0)."),
}


def check_claims(results: Results) -> list[Claim]:
    """Every claim of the study, checked on ``results`` (see the module docstring for the rules)."""
    groups = models_by_condition(results)
    found = {
        "content_driven": _content_driven(groups),
        "index_anchored": _index_anchored(groups),
        "early_peak": _early_peak(groups),
        "gradual_build_up": _gradual_build_up(groups),
        "less_fragile": _less_fragile(results, groups),
        "alpha_sweep": _alpha_sweep(results, groups),
        "delta_fs": _delta_fs(results),
    }
    return [Claim(key, _STATEMENTS[key][0], _STATEMENTS[key][1], verdict or NOT_MEASURED, evidence or "not measured")
            for key, (verdict, evidence) in found.items()]  # fmt: skip
