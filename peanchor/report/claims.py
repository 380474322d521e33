"""Which of the study's claims a set of results replicates: each claim of the paper as a check on the numbers.

The paper states its findings in words ("collapses under shuffling", "less fragile", ...). To say plainly whether
a run shows each of them, every claim is checked against fixed thresholds on the condition means (mean over
seeds), the same for every run and every preset:

=================  =========================================================================================
claim              replicates when (conditions that are not in the results are left out; no condition: not
                   measured)
=================  =========================================================================================
content_driven     ``none`` and ``rpt``: SSDC under RPI within ±NEAR_ZERO at every layer, while SSDC with the
                   tokens in order exceeds GHOST_MAP at some layer (a content-driven "ghost map")
index_anchored     ``ape``, ``sincos``, ``rope``: peak SSDC under RPI ≥ ANCHORED
early_peak         ``ape``, ``sincos``: the peak SSDC under RPI lies in the first half of the layers
gradual_build_up   ``rope``: SSDC under RPI of the last layer ≥ layer 0 + BUILD_UP
less_fragile       at every shift, each of ``ape``, ``sincos``, ``rope`` has an FS at least FS_MARGIN below
                   both ``none``'s and ``rpt``'s
alpha_sweep        the APE scaled by α (points whose clean accuracy is ≥ SWEEP_MIN_ACC, at least MIN_POINTS):
                   ρ(α, ΔSSDC) > 0, and ρ(α, FS) < 0 at every shift (Spearman over the points), each with
                   its permutation p < SIGNIFICANCE
delta_fs           ΔSSDC and FS rank-correlate negatively over the models and α points (at least MIN_POINTS):
                   ρ < 0 with permutation p < SIGNIFICANCE; the evidence adds ρ without the points below
                   SWEEP_MIN_ACC, whose FS says little
=================  =========================================================================================

A correlation claim needs evidence of its size, not only its sign: ρ must have the expected sign *and* the two-sided
permutation test of ρ = 0 (:func:`~peanchor.metrics.stats.permutation_test_spearman`, exact when n! ≤ 10,000, else
10,000 seeded permutations) must give p < SIGNIFICANCE. With fewer than MIN_POINTS points no p can (the exact test's
smallest p is 2/n!), so such a claim is not measured. The evidence prints ρ, p and n of every correlation.

The thresholds are ours, not the paper's (it gives curves, not cut-offs); docs/study.md explains them. With at
least 3 seeds, the evidence of ``less_fragile`` adds the paired bootstrap CI of FS(condition) − FS(none).

Imports: :mod:`peanchor.results`, :mod:`peanchor.report.summary`, :mod:`peanchor.metrics.stats`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from peanchor.metrics.stats import permutation_test_spearman
from peanchor.report.summary import (
    N_PERM,
    Correlation,
    delta_fs_correlation,
    finite,
    fmt,
    models_by_condition,
    paired_differences,
    shift_keys,
)
from peanchor.results import ModelResult, Results

__all__ = [
    "ANCHORED",
    "BUILD_UP",
    "FS_MARGIN",
    "GHOST_MAP",
    "MIN_POINTS",
    "NEAR_ZERO",
    "SIGNIFICANCE",
    "SWEEP_MIN_ACC",
    "Claim",
    "check_claims",
]

NEAR_ZERO = 0.10  # |SSDC| under RPI that counts as "no index-anchored structure"
GHOST_MAP = 0.20  # SSDC with tokens in order that counts as content-driven structure
ANCHORED = 0.25  # peak SSDC under RPI that counts as index-anchored structure
BUILD_UP = 0.10  # how much RoPE's SSDC under RPI must rise from layer 0 to the last layer
FS_MARGIN = 0.05  # how much lower a PE model's FS must be than the ablated and RPT models'
SWEEP_MIN_ACC = 0.20  # α points below this clean accuracy are too broken to read FS from
SIGNIFICANCE = 0.05  # a correlation claim's permutation p must be below this
MIN_POINTS = 5  # the fewest points whose exact two-sided permutation p can be below SIGNIFICANCE: 2/5! = 0.017

_NO_PE = ("none", "rpt")
_PE = ("ape", "sincos", "rope")


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and whether these results show it (``None``: not measured here)."""

    key: str
    statement: str
    replicates: bool | None
    evidence: str


def _mean(values: Sequence[float | None]) -> float:
    vals = [float(v) for v in values if finite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _layers(ms: Sequence[ModelResult], get: Callable[[ModelResult], list[float]]) -> list[float]:
    """Per-layer mean over seeds."""
    rows = [get(m) for m in ms]
    depth = min(len(r) for r in rows)
    return [_mean([r[i] for r in rows]) for i in range(depth)]


def _layers_text(values: Sequence[float]) -> str:
    return " ".join(fmt(v, 2) for v in values)


def _content_driven(groups: dict[str, list[ModelResult]]) -> Claim:
    parts, verdicts = [], []
    for c in (c for c in _NO_PE if c in groups):
        rpi = _layers(groups[c], lambda m: m.ssdc.rpi)
        normal = _layers(groups[c], lambda m: m.ssdc.normal)
        verdicts.append(max(abs(v) for v in rpi) <= NEAR_ZERO and max(normal) > GHOST_MAP)
        parts.append(f"`{c}`: under RPI {_layers_text(rpi)}; in order {_layers_text(normal)}")
    return Claim(
        "content_driven",
        f"Without a positional encoding (and with RPT) the spatial structure is content-driven: SSDC with the tokens "
        f"in order exceeds {GHOST_MAP:.2f} at some layer, and under RPI it stays within ±{NEAR_ZERO:.2f} at every "
        "layer.",
        all(verdicts) if verdicts else None,
        "; ".join(parts) or "not measured",
    )


def _index_anchored(groups: dict[str, list[ModelResult]]) -> Claim:
    peaks = {c: max(_layers(groups[c], lambda m: m.ssdc.rpi)) for c in _PE if c in groups}
    return Claim(
        "index_anchored",
        f"Every positional encoding anchors the structure to the token indices: its SSDC under RPI peaks at "
        f"≥ {ANCHORED:.2f}.",
        all(p >= ANCHORED for p in peaks.values()) if peaks else None,
        "; ".join(f"`{c}` peaks at {fmt(p, 2)}" for c, p in peaks.items()) or "not measured",
    )


def _early_peak(groups: dict[str, list[ModelResult]]) -> Claim:
    parts, verdicts = [], []
    for c in (c for c in ("ape", "sincos") if c in groups):
        rpi = _layers(groups[c], lambda m: m.ssdc.rpi)
        peak = max(range(len(rpi)), key=lambda i: rpi[i])
        verdicts.append(peak < len(rpi) / 2)
        parts.append(f"`{c}` peaks at layer {peak} of 0–{len(rpi) - 1}")
    return Claim(
        "early_peak",
        "The absolute encodings (APE, sin-cos) are anchored from the start: their SSDC under RPI peaks in the first "
        "half of the layers.",
        all(verdicts) if verdicts else None,
        "; ".join(parts) or "not measured",
    )


def _gradual_build_up(groups: dict[str, list[ModelResult]]) -> Claim:
    if "rope" not in groups:
        return Claim("gradual_build_up", "RoPE builds its anchored structure up with depth.", None, "not measured")
    rpi = _layers(groups["rope"], lambda m: m.ssdc.rpi)
    return Claim(
        "gradual_build_up",
        f"RoPE builds its anchored structure up with depth: its last layer's SSDC under RPI is ≥ {BUILD_UP:.2f} above "
        "layer 0's.",
        rpi[-1] - rpi[0] >= BUILD_UP,
        f"`rope` under RPI {_layers_text(rpi)} (last − first {fmt(rpi[-1] - rpi[0], 2, signed=True)})",
    )


def _less_fragile(results: Results, groups: dict[str, list[ModelResult]]) -> Claim:
    pes = [c for c in _PE if c in groups]
    bases = [c for c in _NO_PE if c in groups]
    statement = (f"Positional encodings make the model less fragile: at every shift, each PE model's FS is at least "
                 f"{FS_MARGIN:.2f} below both the ablated model's and RPT's.")  # fmt: skip
    if not pes or not bases:
        return Claim("less_fragile", statement, None, "not measured")
    paired = {(d.condition, d.shift): d for d in paired_differences(results) if d.claim}
    parts, verdicts = [], []
    for k in shift_keys(results):
        fs = {c: _mean([m.fragility.get(k) for m in groups[c]]) for c in pes + bases}
        ceiling = min(fs[c] for c in bases) - FS_MARGIN
        verdicts.append(all(fs[c] <= ceiling for c in pes))
        text = f"{k}: " + ", ".join(f"`{c}` {fmt(fs[c])}" for c in bases + pes)
        cis = [f"{c} − none {fmt(d.mean_diff, signed=True)} [{fmt(d.ci_low, signed=True)}, {fmt(d.ci_high, signed=True)}]"
               for c in pes if (d := paired.get((c, k)))]  # fmt: skip
        if cis:
            text += " (paired 95% CI: " + "; ".join(cis) + ")"
        parts.append(text)
    return Claim("less_fragile", statement, all(verdicts), "; ".join(parts))


def _rank_test(x: Sequence[float], y: Sequence[float]) -> Correlation:
    """Spearman ρ of ``x`` and ``y`` with its permutation p, as the ΔSSDC–FS correlation computes it."""
    test = permutation_test_spearman(x, y, n_perm=N_PERM, seed=0)
    return Correlation(None, len(x), test["rho"], test["p_value"], bool(test["exact"]))


def _shows(corr: Correlation, sign: int) -> bool:
    """ρ has the sign ``sign`` and its permutation p is below SIGNIFICANCE."""
    return finite(corr.rho) and corr.rho * sign > 0 and finite(corr.p_value) and corr.p_value < SIGNIFICANCE


def _rank_text(corr: Correlation) -> str:
    """``ρ = -0.63, p = 0.008, n = 17``: what a correlation claim rests on."""
    if not finite(corr.p_value):
        return f"ρ = {fmt(corr.rho, 2)}, p = —, n = {corr.n}"
    p = f"{corr.p_value:.3g}" + ("" if corr.exact else f" ({N_PERM:,} permutations)")
    return f"ρ = {fmt(corr.rho, 2)}, p = {p}, n = {corr.n}"


def _alpha_sweep(results: Results) -> Claim:
    statement = (f"Scaling the learned APE down (α < 1) removes anchored structure and makes the model more fragile: "
                 f"over the α points with clean accuracy ≥ {SWEEP_MIN_ACC:.1f}, ΔSSDC rises with α and FS falls "
                 f"with α (Spearman ρ, each with permutation p < {SIGNIFICANCE:g}).")  # fmt: skip
    rows = [p for p in results.alpha_sweep if p.condition == "ape"]
    by_alpha: dict[float, list] = {}
    for p in rows:
        by_alpha.setdefault(p.alpha, []).append(p)
    points = sorted(
        (a, _mean([p.clean_acc for p in ps]), _mean([p.delta_ssdc for p in ps]), ps) for a, ps in by_alpha.items()
    )
    usable = [pt for pt in points if pt[1] >= SWEEP_MIN_ACC]
    if len(usable) < MIN_POINTS:
        return Claim("alpha_sweep", statement, None, f"{len(usable)} usable α point(s) of {len(points)}, fewer than "
                     f"{MIN_POINTS}: no permutation p can fall below {SIGNIFICANCE:g}; not measured")  # fmt: skip
    alphas = [a for a, *_ in usable]
    delta = _rank_test(alphas, [d for _, _, d, _ in usable])
    parts = [f"{len(usable)} α points ({', '.join(f'{a:g}' for a in alphas)}): ρ(α, ΔSSDC): {_rank_text(delta)}"]
    verdicts = [_shows(delta, +1)]
    for k in shift_keys(results):
        fs = _rank_test(alphas, [_mean([p.fragility.get(k) for p in ps]) for *_, ps in usable])
        verdicts.append(_shows(fs, -1))
        parts.append(f"ρ(α, FS {k}): {_rank_text(fs)}")
    return Claim("alpha_sweep", statement, all(verdicts), "; ".join(parts))


def _delta_fs(results: Results) -> Claim:
    corr = delta_fs_correlation(results)
    statement = (f"More index-anchored structure goes with less fragility: ΔSSDC and FS correlate negatively "
                 f"(Spearman ρ < 0, permutation p < {SIGNIFICANCE:g}).")  # fmt: skip
    if not finite(corr.rho) or corr.n < MIN_POINTS:
        return Claim("delta_fs", statement, None, f"{corr.n} point(s), fewer than {MIN_POINTS} or constant values: "
                     "not measured")  # fmt: skip
    detail = f"Spearman {_rank_text(corr)} points (FS {corr.shift})"
    # The verdict uses every point, as the paper does; a point near chance has an FS near 0 whatever its
    # structure, so the detail says how much such points carry.
    usable = delta_fs_correlation(results, corr.shift, min_clean_acc=SWEEP_MIN_ACC)
    if usable.n < corr.n:
        detail += (f"; {corr.n - usable.n} of the points have clean accuracy < {SWEEP_MIN_ACC:.2f}, "
                   f"without them {_rank_text(usable)}")  # fmt: skip
    return Claim("delta_fs", statement, _shows(corr, -1), detail)


def check_claims(results: Results) -> list[Claim]:
    """Every claim of the study, checked on ``results`` (see the module docstring for the rules)."""
    groups = models_by_condition(results)
    return [
        _content_driven(groups),
        _index_anchored(groups),
        _early_peak(groups),
        _gradual_build_up(groups),
        _less_fragile(results, groups),
        _alpha_sweep(results),
        _delta_fs(results),
    ]
