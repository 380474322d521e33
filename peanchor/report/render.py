"""``report.md`` and a self-contained ``report.html`` from a results dict (never from models).

The report is first built as a small list of blocks (headings, paragraphs, tables, figures), then
rendered twice: Markdown (figures referenced by relative path) and HTML (PNG figures inlined as
base64 data URIs, no external resources). Every sentence about the results is generated from
comparisons of the numbers, so the prose says what these numbers show and nothing more.

Statistics: mean ± sample std over seeds; 95% percentile bootstrap CIs of the mean (10,000
resamples, seed 0) once a condition has at least 3 seeds; paired bootstrap of FS differences
against ``none`` (paired by seed); a permutation test for the ΔSSDC–FS Spearman ρ.
"""

from __future__ import annotations

import base64
import html
import json
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from peanchor import fileio
from peanchor.errors import DataError
from peanchor.metrics.stats import bootstrap_ci, mean_std, paired_bootstrap_diff
from peanchor.report import figures as F
from peanchor.conditions import CONDITIONS, PAPER, label as display_name

PAPER_DATASET, PAPER_IMG_SIZE, PAPER_LABEL, PAPER_SEEDS, PAPER_SHIFTS = (
    PAPER.dataset, PAPER.img_size, PAPER.label, PAPER.seeds, PAPER.shifts)
REFERENCE_TABLE = {n: c.reference for n, c in CONDITIONS.items() if c.reference}
SSDC_LAYER_NOTES = {n: c.ssdc_note for n, c in CONDITIONS.items() if c.ssdc_note}

__all__ = ["build_report", "load_results", "render_html", "render_markdown", "validate_results", "write_report"]

MIN_SEEDS_FOR_CLAIMS = 3
CI_LEVEL = 0.95
N_BOOT = 10000
ALPHA = 0.05  # significance level used in the generated sentences


# ---- loading and checking -------------------------------------------------------------------------
def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_number(v: Any, where: str, source: str) -> None:
    if v is not None and not _is_number(v):
        raise DataError(f"{source}: {where} must be a number or null, got {v!r}")


def _check_number_list(v: Any, where: str, source: str) -> None:
    if v is None:
        return
    if not isinstance(v, list):
        raise DataError(f"{source}: {where} must be a list of numbers, got {type(v).__name__}")
    for i, x in enumerate(v):
        _check_number(x, f"{where}[{i}]", source)


def _check_number_map(v: Any, where: str, source: str) -> None:
    if v is None:
        return
    if not isinstance(v, dict):
        raise DataError(f"{source}: {where} must be an object of numbers, got {type(v).__name__}")
    for k, x in v.items():
        _check_number(x, f"{where}.{k}", source)


def validate_results(results: Any, source: str = "results") -> dict[str, Any]:
    """Check the shape of a results dict; raise :class:`DataError` naming the first key at fault.

    Required: ``models``, a list whose entries have ``name`` and ``condition``; every ``alpha_sweep``
    entry needs ``condition`` and ``alpha``. Everything else is optional, and extra keys are ignored.
    """
    if not isinstance(results, dict):
        raise DataError(f"{source}: expected a JSON object at the top level, got {type(results).__name__}")
    if "models" not in results:
        raise DataError(f"{source}: missing required key 'models' (the list of evaluated models)")
    models = results["models"]
    if not isinstance(models, list):
        raise DataError(f"{source}: 'models' must be a list, got {type(models).__name__}")
    for i, m in enumerate(models):
        where = f"models[{i}]"
        if not isinstance(m, dict):
            raise DataError(f"{source}: {where} must be an object, got {type(m).__name__}")
        for key in ("name", "condition"):
            if key not in m:
                raise DataError(f"{source}: {where} is missing required key '{key}'")
            if not isinstance(m[key], str) or not m[key]:
                raise DataError(f"{source}: {where}.{key} must be a non-empty string, got {m[key]!r}")
        for key in ("clean_acc", "delta_ssdc"):
            _check_number(m.get(key), f"{where}.{key}", source)
        for key in ("acc", "fragility"):
            _check_number_map(m.get(key), f"{where}.{key}", source)
        ssdc = m.get("ssdc")
        if ssdc is not None:
            if not isinstance(ssdc, dict):
                raise DataError(f"{source}: {where}.ssdc must be an object, got {type(ssdc).__name__}")
            for key in ("normal", "rpi", "normal_std", "rpi_std"):
                _check_number_list(ssdc.get(key), f"{where}.ssdc.{key}", source)
            for key in ("normal_ci", "rpi_ci"):
                ci = ssdc.get(key)
                if ci is None:
                    continue
                if not isinstance(ci, list) or len(ci) != 2:
                    raise DataError(f"{source}: {where}.ssdc.{key} must be [[low per layer], [high per layer]], got {ci!r}")
                for j, bound in enumerate(ci):
                    _check_number_list(bound, f"{where}.ssdc.{key}[{j}]", source)
        sev = m.get("severities")
        if sev is not None:
            if not isinstance(sev, dict):
                raise DataError(f"{source}: {where}.severities must be an object, got {type(sev).__name__}")
            for key, accs in sev.items():
                _check_number_list(accs, f"{where}.severities.{key}", source)
    sweep = results.get("alpha_sweep")
    if sweep is not None:
        if not isinstance(sweep, list):
            raise DataError(f"{source}: 'alpha_sweep' must be a list, got {type(sweep).__name__}")
        for i, p in enumerate(sweep):
            where = f"alpha_sweep[{i}]"
            if not isinstance(p, dict):
                raise DataError(f"{source}: {where} must be an object, got {type(p).__name__}")
            for key in ("condition", "alpha"):
                if key not in p:
                    raise DataError(f"{source}: {where} is missing required key '{key}'")
            if not _is_number(p["alpha"]):
                raise DataError(f"{source}: {where}.alpha must be a number, got {p['alpha']!r}")
            for key in ("delta_ssdc", "clean_acc"):
                _check_number(p.get(key), f"{where}.{key}", source)
            for key in ("acc", "fragility"):
                _check_number_map(p.get(key), f"{where}.{key}", source)
    for key, kind in (("shifts", dict), ("failed", list)):
        if results.get(key) is not None and not isinstance(results[key], kind):
            raise DataError(f"{source}: '{key}' must be a{'n object' if kind is dict else ' list'}, got {type(results[key]).__name__}")
    _check_number(results.get("wall_seconds"), "wall_seconds", source)
    if results.get("img_size") is not None and not _is_number(results["img_size"]):
        raise DataError(f"{source}: img_size must be a number, got {results['img_size']!r}")
    return results


def load_results(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check ``results.json`` (or ``DIR/results.json`` for a directory)."""
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"{p}: no such results file (run `peanchor reproduce` first, or give the path to results.json)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {p}: {getattr(e, 'strerror', None) or e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise DataError(f"{p}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}") from None
    return validate_results(data, source=str(p))


# ---- the document model ---------------------------------------------------------------------------
@dataclass
class Heading:
    level: int
    text: str


@dataclass
class Paragraph:
    text: str


@dataclass
class Bullets:
    items: list[str]


@dataclass
class Table:
    header: list[str]
    rows: list[list[str]]
    caption: str | None = None


@dataclass
class FigureBlock:
    figure: F.FigureFile
    number: int


Block = Union[Heading, Paragraph, Bullets, Table, FigureBlock]


@dataclass
class Report:
    title: str
    blocks: list[Block] = field(default_factory=list)

    def add(self, *blocks: Block) -> None:
        self.blocks.extend(blocks)


# ---- numbers -------------------------------------------------------------------------------------
def _fmt(x: Any, digits: int = 3, signed: bool = False) -> str:
    if not F.finite(x):
        return "—"
    return f"{x:+.{digits}f}" if signed else f"{x:.{digits}f}"


def _fmt_p(p: Any) -> str:
    if not F.finite(p):
        return "—"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


@dataclass
class Summary:
    n: int
    mean: float
    std: float
    ci: tuple[float, float] | None

    def cell(self) -> str:
        if self.n == 0:
            return "—"
        text = _fmt(self.mean)
        if self.n >= 2:
            text += f" ± {_fmt(self.std)}"
        if self.ci is not None:
            text += f" [{_fmt(self.ci[0])}, {_fmt(self.ci[1])}]"
        return text


def summarise(values: Sequence[Any]) -> Summary:
    """Mean ± std of the finite values, with a 95% bootstrap CI once there are >= 3 of them."""
    vals = [float(v) for v in values if F.finite(v)]
    if not vals:
        return Summary(0, math.nan, math.nan, None)
    mean, std = mean_std(vals)
    ci = bootstrap_ci(vals, level=CI_LEVEL, n_boot=N_BOOT, seed=0) if len(vals) >= MIN_SEEDS_FOR_CLAIMS else None
    return Summary(len(vals), mean, std, ci)


def _max_ssdc_rpi(m: dict[str, Any]) -> float | None:
    values = [v for v in ((m.get("ssdc") or {}).get("rpi") or []) if F.finite(v)]
    return max(values) if values else None


def _metric_getters(shifts: Sequence[str]) -> list[tuple[str, str, Callable[[dict[str, Any]], Any]]]:
    """(key, column label, getter) for the per-condition table."""
    getters: list[tuple[str, str, Callable[[dict[str, Any]], Any]]] = [("clean_acc", "clean acc", lambda m: m.get("clean_acc"))]
    for k in shifts:
        getters.append((f"fs_{k}", f"FS {k}", lambda m, k=k: (m.get("fragility") or {}).get(k)))
    getters.append(("max_ssdc_rpi", "max SSDC (RPI)", _max_ssdc_rpi))
    getters.append(("delta_ssdc", "ΔSSDC", lambda m: m.get("delta_ssdc")))
    return getters


def _describe_shift(spec: Any) -> str:
    if not isinstance(spec, dict):
        return str(spec)
    params = ", ".join(f"{k}={v}" for k, v in spec.items() if k != "kind")
    return f"{spec.get('kind', '?')}({params})"


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    if h:
        return f"{h} h {m:02d} min {s:02d} s"
    return f"{m} min {s:02d} s" if m else f"{s} s"


def _c(condition: str) -> str:
    return f"`{condition}`"


# ---- sections ------------------------------------------------------------------------------------
class _Builder:
    def __init__(self, results: dict[str, Any], figures: list[F.FigureFile]) -> None:
        self.r = results
        self.groups = F.models_by_condition(results)
        self.shifts = F.shift_keys(results)
        self.figures = {f.key: f for f in figures}
        self.figure_count = 0
        self.getters = _metric_getters(self.shifts)
        self.summaries: dict[str, dict[str, Summary]] = {
            c: {key: summarise([get(m) for m in ms]) for key, _, get in self.getters} for c, ms in self.groups.items()
        }
        dataset = results.get("dataset") or "unknown dataset"
        size = results.get("img_size")
        self.setting = f"{dataset}" + (f", {size} px" if size else "")
        title = f"peanchor report: {self.setting}" + (f" (preset {results['preset']})" if results.get("preset") else "")
        self.doc = Report(title)

    # -- helpers
    def figure(self, key: str) -> None:
        if key in self.figures:
            self.figure_count += 1
            self.doc.add(FigureBlock(self.figures[key], self.figure_count))

    def seeds(self, condition: str) -> int:
        return len(self.groups.get(condition, []))

    def mean(self, condition: str, key: str) -> float:
        return self.summaries[condition][key].mean

    def ranked(self, key: str) -> list[tuple[str, float]]:
        pairs = [(c, self.mean(c, key)) for c in self.groups if F.finite(self.mean(c, key))]
        return sorted(pairs, key=lambda p: p[1])

    # -- sections
    def intro(self) -> None:
        r = self.r
        n_models = len(r.get("models") or [])
        conds = ", ".join(f"{_c(c)} (n={self.seeds(c)})" for c in self.groups) or "none"
        self.doc.add(Paragraph(
            f"{n_models} model{'s' if n_models != 1 else ''} on {self.setting}; conditions (seeds): {conds}. "
            "SSDC is the Spearman correlation between token similarity and negative grid distance, per layer; "
            "RPI shuffles the patch tokens at inference while the positional encodings stay on their slots; "
            "ΔSSDC = SSDC(layer 1) − SSDC(layer 0) under RPI; the Fragility Score is FS = 1 − A_shift / A_clean."
        ))
        self.doc.add(Paragraph(self.sample_size_sentence()))

    def sample_size_sentence(self) -> str:
        counts = {c: self.seeds(c) for c in self.groups}
        if not counts:
            return "No models were evaluated: no claims."
        few = {c: n for c, n in counts.items() if n < MIN_SEEDS_FOR_CLAIMS}
        if not few:
            return (f"Every condition has at least {min(counts.values())} seeds; intervals in brackets are 95% percentile "
                    f"bootstrap CIs of the mean over seeds ({N_BOOT:,} resamples).")
        if len(few) == len(counts):
            top = max(counts.values())
            if top == 1:
                return "n=1 seed: no significance claims. Every number is a single training run."
            return (f"n≤{top} seeds per condition: no significance claims; ± is the std over the seeds and no intervals are "
                    f"given below {MIN_SEEDS_FOR_CLAIMS} seeds.")
        listed = ", ".join(f"{_c(c)} n={n}" for c, n in few.items())
        return (f"Conditions with fewer than {MIN_SEEDS_FOR_CLAIMS} seeds ({listed}): no significance claims for them. "
                "Intervals in brackets are 95% bootstrap CIs of the mean for the others.")

    def findings(self) -> None:
        items: list[str] = []
        acc = self.ranked("clean_acc")
        if len(acc) >= 2:
            items.append(f"Clean accuracy is highest for {_c(acc[-1][0])} ({_fmt(acc[-1][1])}) and lowest for "
                         f"{_c(acc[0][0])} ({_fmt(acc[0][1])}).")
        elif acc:
            items.append(f"Clean accuracy of {_c(acc[0][0])}: {_fmt(acc[0][1])}.")
        for k in self.shifts:
            fs = self.ranked(f"fs_{k}")
            if len(fs) >= 2:
                items.append(f"FS ({k}) is lowest, i.e. most robust, for {_c(fs[0][0])} ({_fmt(fs[0][1])}) and highest for "
                             f"{_c(fs[-1][0])} ({_fmt(fs[-1][1])}).")
            if "none" in dict(fs) and len(fs) >= 2:
                base = dict(fs)["none"]
                lower = [c for c, v in fs if c != "none" and v < base]
                higher = [c for c, v in fs if c != "none" and v >= base]
                text = f"{len(lower)} of {len(lower) + len(higher)} other conditions have a lower mean FS ({k}) than `none`"
                text += f" ({', '.join(_c(c) for c in lower)})" if lower else ""
                text += f"; not lower: {', '.join(_c(c) for c in higher)}." if higher else "."
                items.append(text)
        peak = self.ranked("max_ssdc_rpi")
        if len(peak) >= 2:
            items.append(f"Under RPI, the highest SSDC over layers (mean over seeds) ranges from {_fmt(peak[0][1])} "
                         f"({_c(peak[0][0])}) to {_fmt(peak[-1][1])} ({_c(peak[-1][0])}).")
        delta = self.ranked("delta_ssdc")
        if len(delta) >= 2:
            items.append(f"ΔSSDC is largest for {_c(delta[-1][0])} ({_fmt(delta[-1][1])}) and smallest for "
                         f"{_c(delta[0][0])} ({_fmt(delta[0][1])}).")
        items += self.alpha_sentences()
        corr = F.delta_fs_correlation(self.r)
        if F.finite(corr["rho"]):
            items.append(self.correlation_sentence(corr))
        if items:
            self.doc.add(Heading(2, "What the numbers show"), Bullets(items))

    def main_table(self) -> None:
        if not self.groups:
            return
        header = ["condition", "n"] + [label for _, label, _ in self.getters]
        rows = [[display_name(c), str(self.seeds(c))] + [self.summaries[c][key].cell() for key, _, _ in self.getters]
                for c in self.groups]
        self.doc.add(Heading(2, "Results per condition"), Table(
            header, rows,
            "mean ± std over seeds; [95% bootstrap CI of the mean] when n ≥ 3. FS = 1 − A_shift/A_clean (lower is more "
            "robust); max SSDC (RPI) is each model's highest SSDC over layers under RPI."))
        self.figure("ssdc_per_layer")
        notes = [f"{display_name(c)}: {SSDC_LAYER_NOTES[c]}" for c in self.groups if c in SSDC_LAYER_NOTES]
        if notes and "ssdc_per_layer" in self.figures:
            self.doc.add(Paragraph(f"For comparison, the paper's SSDC per layer under RPI ({PAPER_LABEL}):"), Bullets(notes))

    def paper_comparison(self) -> None:
        ref_conds = [c for c in REFERENCE_TABLE if c in self.groups] + [c for c in REFERENCE_TABLE if c not in self.groups]
        conds = list(self.groups) + [c for c in ref_conds if c not in self.groups]
        metrics = [("clean_acc", "clean acc"), ("fs_jpeg", "FS jpeg"), ("fs_blur", "FS blur")]
        header = ["condition", "n (ours)"]
        for _, label in metrics:
            header += [f"{label} (ours)", f"{label} ({PAPER_LABEL})"]
        rows = []
        for c in conds:
            row = [display_name(c), str(self.seeds(c))]
            for key, _ in metrics:
                ours = self.summaries.get(c, {}).get(key)
                ref = REFERENCE_TABLE[c].get(key) if c in REFERENCE_TABLE else None
                row += [ours.cell() if ours else "—", f"{ref.mean:.4f} ± {ref.std:.4f}" if ref else "—"]
            rows.append(row)
        self.doc.add(Heading(2, f"Ours beside the paper ({PAPER_LABEL})"), Table(
            header, rows, f"paper: mean ± std over {PAPER_SEEDS} seeds; ViT with 12 blocks, width 384, 8 heads, patch 16 at "
            f"{PAPER_IMG_SIZE} px; JPEG quality 5 and blur kernel 5, σ 2.5."))
        differences = self.setting_differences()
        if differences:
            self.doc.add(Paragraph(
                f"Note: our setting differs from the paper's ({'; '.join(differences)}), so the absolute numbers are not "
                "comparable; compare the orderings of the conditions."))
        for key, label in metrics:
            sentence = self.ordering_sentence(key, label)
            if sentence:
                self.doc.add(Paragraph(sentence))

    def setting_differences(self) -> list[str]:
        out = []
        dataset = str(self.r.get("dataset") or "")
        if re.sub(r"[^a-z0-9]", "", dataset.lower()) != "imagenet100":
            out.append(f"dataset {dataset or 'unknown'} instead of {PAPER_DATASET}")
        size = self.r.get("img_size")
        if size != PAPER_IMG_SIZE:
            out.append(f"{size if size else 'unknown'} px images instead of {PAPER_IMG_SIZE} px")
        shifts = self.r.get("shifts") or {}
        for k, spec in PAPER_SHIFTS.items():
            if k in shifts and shifts[k] != spec:
                out.append(f"{k} shift {_describe_shift(shifts[k])} instead of {_describe_shift(spec)}")
        return out

    def ordering_sentence(self, key: str, label: str) -> str | None:
        shared = [c for c in REFERENCE_TABLE if c in self.groups and F.finite(self.mean(c, key))]
        if len(shared) < 2:
            return None
        ours = sorted(shared, key=lambda c: self.mean(c, key))
        paper = sorted(shared, key=lambda c: REFERENCE_TABLE[c].get(key).mean)
        pairs = [(a, b) for i, a in enumerate(shared) for b in shared[i + 1:]]
        agree = sum((self.mean(a, key) - self.mean(b, key)) * (REFERENCE_TABLE[a].get(key).mean - REFERENCE_TABLE[b].get(key).mean) > 0
                    for a, b in pairs)
        return (f"{label}, lowest to highest: ours {' < '.join(_c(c) for c in ours)}; paper {' < '.join(_c(c) for c in paper)}. "
                f"{agree} of {len(pairs)} pairs of conditions are ordered as in the paper.")

    def shifts_section(self) -> None:
        shifts = self.r.get("shifts") or {}
        keys = list(shifts) + [k for k in PAPER_SHIFTS if k not in shifts]
        rows = [[k, _describe_shift(shifts[k]) if k in shifts else "—",
                 _describe_shift(PAPER_SHIFTS[k]) if k in PAPER_SHIFTS else "—"] for k in keys]
        self.doc.add(Heading(2, "Shifts"), Table(["shift", "ours", PAPER_LABEL], rows,
                                                 "applied to uint8 images after the resize, before normalisation."))
        table = self.r.get("severity_table")
        if isinstance(table, str):
            self.doc.add(Paragraph(f"Severity sweeps use the {table} table."))

    def paired_differences(self) -> None:
        if "none" not in self.groups or len(self.groups) < 2:
            return
        base = {m.get("seed"): m for m in self.groups["none"] if m.get("seed") is not None}
        rows, sentences = [], []
        for c, ms in self.groups.items():
            if c == "none":
                continue
            for k in self.shifts:
                pairs = []
                for m in ms:
                    other = base.get(m.get("seed")) if m.get("seed") is not None else None
                    a = (m.get("fragility") or {}).get(k)
                    b = (other.get("fragility") or {}).get(k) if other else None
                    if F.finite(a) and F.finite(b):
                        pairs.append((float(a), float(b)))
                if not pairs:
                    continue
                n = len(pairs)
                diff = paired_bootstrap_diff([a for a, _ in pairs], [b for _, b in pairs], level=CI_LEVEL, n_boot=N_BOOT, seed=0)
                claim = n >= MIN_SEEDS_FOR_CLAIMS
                ci = f"[{_fmt(diff['ci_low'], signed=True)}, {_fmt(diff['ci_high'], signed=True)}]" if claim else "—"
                rows.append([display_name(c), k, str(n), _fmt(diff["mean_diff"], signed=True), ci,
                             _fmt_p(diff["p_value"]) if claim else "—"])
                direction = "lower" if diff["mean_diff"] < 0 else "higher"
                text = f"{_c(c)} vs `none`, FS ({k}): {direction} by {_fmt(abs(diff['mean_diff']))} on average over {n} paired seed{'s' if n > 1 else ''}"
                if not claim:
                    text += f"; n={n}: no significance claim."
                elif diff["ci_low"] > 0 or diff["ci_high"] < 0:
                    text += f"; the 95% CI {ci} excludes 0 (p = {_fmt_p(diff['p_value'])})."
                else:
                    text += f"; the 95% CI {ci} includes 0, so no clear difference (p = {_fmt_p(diff['p_value'])})."
                sentences.append(text)
        if not rows:
            return
        self.doc.add(Heading(2, "Fragility against `none`, paired by seed"), Table(
            ["condition", "shift", "pairs", "mean FS diff (condition − none)", "95% CI", "p"], rows,
            f"paired bootstrap over seeds ({N_BOOT:,} resamples); negative = more robust than `none`; CI and p only "
            f"with ≥ {MIN_SEEDS_FOR_CLAIMS} pairs."), Bullets(sentences))

    def alpha_sentences(self) -> list[str]:
        sweep = [p for p in self.r.get("alpha_sweep") or [] if F.finite(p.get("alpha"))]
        out = []
        for c in F.conditions(str(p["condition"]) for p in sweep):
            pts = [p for p in sweep if p["condition"] == c]
            hi, lo = max(p["alpha"] for p in pts), min(p["alpha"] for p in pts)
            if hi == lo:
                continue

            def at(alpha: float, get: Callable[[dict[str, Any]], Any]) -> float:
                vals = [get(p) for p in pts if abs(p["alpha"] - alpha) < 1e-9 and F.finite(get(p))]
                return sum(vals) / len(vals) if vals else math.nan

            parts = []
            d_hi, d_lo = at(hi, lambda p: p.get("delta_ssdc")), at(lo, lambda p: p.get("delta_ssdc"))
            if F.finite(d_hi) and F.finite(d_lo):
                parts.append(f"ΔSSDC goes from {_fmt(d_hi)} to {_fmt(d_lo)}")
            for k in self.shifts:
                f_hi = at(hi, lambda p, k=k: (p.get("fragility") or {}).get(k))
                f_lo = at(lo, lambda p, k=k: (p.get("fragility") or {}).get(k))
                if F.finite(f_hi) and F.finite(f_lo):
                    parts.append(f"FS ({k}) from {_fmt(f_hi)} to {_fmt(f_lo)}")
            if parts:
                out.append(f"{_c(c)}: as α falls from {hi:g} to {lo:g}, " + " and ".join(parts) + ".")
        return out

    def alpha_section(self) -> None:
        sweep = [p for p in self.r.get("alpha_sweep") or [] if F.finite(p.get("alpha"))]
        if not sweep:
            return
        refs = {n: c.alpha_sweep for n, c in CONDITIONS.items() if c.alpha_sweep}
        header = ["condition", "α", "n", "ΔSSDC", "clean acc"] + [f"FS {k}" for k in self.shifts]
        header += [f"ΔSSDC ({PAPER_LABEL})", f"FS jpeg ({PAPER_LABEL})"]
        rows = []
        for c in F.conditions(str(p["condition"]) for p in sweep):
            pts = [p for p in sweep if p["condition"] == c]
            for alpha in sorted({round(float(p["alpha"]), 6) for p in pts}, reverse=True):
                at = [p for p in pts if abs(p["alpha"] - alpha) < 1e-9]
                row = [display_name(c), f"{alpha:g}", str(len(at)), summarise([p.get("delta_ssdc") for p in at]).cell(),
                       summarise([p.get("clean_acc") for p in at]).cell()]
                row += [summarise([(p.get("fragility") or {}).get(k) for p in at]).cell() for k in self.shifts]
                ref = refs[c].at(alpha) if c in refs else None
                row += [f"{ref[0]:.2f}", f"{ref[1]:.3f}"] if ref else ["—", "—"]
                rows.append(row)
        self.doc.add(Heading(2, "α sweep"), Paragraph(
            "The PE is multiplied by α at inference without retraining. FS uses clean and shifted accuracy both measured "
            "at that α with RPI off; ΔSSDC is measured with RPI on."))
        self.figure("alpha_sweep")
        self.doc.add(Table(header, rows, f"mean ± std over seeds. Paper columns: APE {refs['ape'].seeds} seeds; "
                                         f"SPE {refs['sincos'].seeds} seed, endpoints only."))

    def correlation_sentence(self, corr: dict[str, Any]) -> str:
        rho, p = corr["rho"], corr["p_value"]
        sign = "negative" if rho < 0 else "positive"
        text = (f"Across {corr['n']} points (models and α-sweep points), ΔSSDC and FS ({corr['shift']}) have Spearman "
                f"ρ = {rho:+.2f} (permutation p = {_fmt_p(p)}); ")
        if p < ALPHA:
            text += f"the rank correlation is {sign} at the {ALPHA:g} level."
        else:
            text += f"the permutation test does not reject ρ = 0 at the {ALPHA:g} level."
        return text

    def correlation_section(self) -> None:
        corr = F.delta_fs_correlation(self.r)
        if corr["n"] == 0:
            return
        self.doc.add(Heading(2, "ΔSSDC against Fragility"))
        if F.finite(corr["rho"]):
            self.doc.add(Paragraph(self.correlation_sentence(corr) + (
                " The paper's claim (more index-anchored structure, less fragility) predicts a negative ρ. "
                "Points from one model at several α are not independent, so the p-value is optimistic; "
                + ("the p-value is exact (all permutations)." if corr["exact"] else f"{F.N_PERM:,} random permutations.")
            )))
        else:
            self.doc.add(Paragraph(f"Spearman ρ is undefined with {corr['n']} point(s) or constant values."))
        self.figure("delta_ssdc_vs_fs")

    def severity_section(self) -> None:
        rows = []
        for c, ms in self.groups.items():
            kinds: list[str] = []
            for m in ms:
                kinds += [k for k in (m.get("severities") or {}) if k not in kinds]
            for k in kinds:
                series = [m["severities"][k] for m in ms if isinstance((m.get("severities") or {}).get(k), list)]
                length = max(len(s) for s in series)
                cells = [summarise([s[i] if i < len(s) else None for s in series]).cell() for i in range(length)]
                rows.append([display_name(c), k, str(len(series))] + cells)
        if not rows:
            return
        width = max(len(r) for r in rows) - 3
        rows = [r + ["—"] * (width + 3 - len(r)) for r in rows]
        table = self.r.get("severity_table")
        self.doc.add(Heading(2, "Severity sweeps"), Paragraph(
            "Top-1 accuracy at corruption severities 1–5" + (f" from the {table} table." if isinstance(table, str) else ".")))
        self.figure("severity_curves")
        self.doc.add(Table(["condition", "shift", "n"] + [f"sev {i + 1}" for i in range(width)], rows, "mean ± std over seeds."))

    def models_table(self) -> None:
        models = [m for ms in self.groups.values() for m in ms]
        if not models:
            return
        header = ["model", "condition", "seed", "clean acc"] + [f"FS {k}" for k in self.shifts]
        header += ["max SSDC (RPI)", "ΔSSDC", "epochs", "train time"]
        rows = []
        for m in models:
            train = m.get("train") if isinstance(m.get("train"), dict) else {}
            secs = train.get("seconds")
            rows.append([m["name"], m["condition"], str(m.get("seed", "—")), _fmt(m.get("clean_acc"))]
                        + [_fmt((m.get("fragility") or {}).get(k)) for k in self.shifts]
                        + [_fmt(_max_ssdc_rpi(m)), _fmt(m.get("delta_ssdc")), str(train.get("epochs", "—")),
                           _duration(secs) if F.finite(secs) else "—"])
        self.doc.add(Heading(2, "Every model"), Table(header, rows))

    def failed_section(self) -> None:
        failed = self.r.get("failed") or []
        if not failed:
            return
        items = []
        for f in failed:
            if isinstance(f, dict):
                items.append(f"`{f.get('name', '?')}`: {f.get('error', 'no error recorded')}")
            else:
                items.append(str(f))
        self.doc.add(Heading(2, "Failed"), Paragraph(f"{len(items)} run(s) failed and are not in the numbers above:"),
                     Bullets(items))

    def run_section(self) -> None:
        wall = self.r.get("wall_seconds")
        text = f"Total wall time: {_duration(wall)}." if F.finite(wall) else "Wall time was not recorded."
        self.doc.add(Heading(2, "Run"), Paragraph(text + " Reference numbers: arXiv 2606.00124 (Mannes, 2026)."))

    def build(self) -> Report:
        self.intro()
        self.findings()
        self.main_table()
        self.paper_comparison()
        self.shifts_section()
        self.paired_differences()
        self.alpha_section()
        self.correlation_section()
        self.severity_section()
        self.models_table()
        self.failed_section()
        self.run_section()
        return self.doc


def build_report(results: dict[str, Any], figures: list[F.FigureFile] | None = None) -> Report:
    """The report as blocks (figures already drawn, or none)."""
    validate_results(results)
    return _Builder(results, figures or []).build()


# ---- rendering -----------------------------------------------------------------------------------
def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _relative(path: Path, base: Path) -> str:
    return Path(os.path.relpath(path, base)).as_posix()


def render_markdown(report: Report, out_dir: str | os.PathLike[str]) -> str:
    """Markdown with figures referenced relative to ``out_dir``."""
    base = Path(out_dir)
    lines = [f"# {report.title}", ""]
    for b in report.blocks:
        if isinstance(b, Heading):
            lines += [f"{'#' * b.level} {b.text}", ""]
        elif isinstance(b, Paragraph):
            lines += [b.text, ""]
        elif isinstance(b, Bullets):
            lines += [f"- {item}" for item in b.items] + [""]
        elif isinstance(b, Table):
            lines.append("| " + " | ".join(_md_cell(h) for h in b.header) + " |")
            lines.append("|" + "|".join("---" for _ in b.header) + "|")
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in b.rows]
            lines.append("")
            if b.caption:
                lines += [f"*{b.caption}*", ""]
        elif isinstance(b, FigureBlock):
            f = b.figure
            lines += [f"![Figure {b.number}: {f.title}]({_relative(f.png, base)})", "",
                      f"*Figure {b.number}. {f.caption}* ([PDF]({_relative(f.pdf, base)}))", ""]
    return "\n".join(lines).rstrip() + "\n"


_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;
color:#111;line-height:1.45}
h1{font-size:1.6rem}h2{font-size:1.25rem;margin-top:2rem;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.8rem 0;font-size:.85rem}
th,td{border:1px solid #bbb;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f0f0f0}tr:nth-child(even) td{background:#fafafa}
caption{caption-side:bottom;text-align:left;font-size:.8rem;color:#444;padding-top:.3rem}
figure{margin:1rem 0}img{max-width:100%;height:auto}figcaption{font-size:.85rem;color:#333}
code{background:#f3f3f3;padding:0 .2rem;border-radius:3px}
""".strip()


def _inline(text: str) -> str:
    """Escape for HTML and turn `code` spans into <code>."""
    escaped = html.escape(text, quote=True)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", escaped)


def render_html(report: Report) -> str:
    """One self-contained HTML page: inline CSS, PNG figures as base64 data URIs, no external resources."""
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             '<meta name="viewport" content="width=device-width, initial-scale=1">',
             f"<title>{html.escape(report.title)}</title>", f"<style>{_CSS}</style>", "</head>", "<body>",
             f"<h1>{_inline(report.title)}</h1>"]
    for b in report.blocks:
        if isinstance(b, Heading):
            level = min(max(b.level, 2), 6)
            parts.append(f"<h{level}>{_inline(b.text)}</h{level}>")
        elif isinstance(b, Paragraph):
            parts.append(f"<p>{_inline(b.text)}</p>")
        elif isinstance(b, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in b.items) + "</ul>")
        elif isinstance(b, Table):
            rows = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in row) + "</tr>" for row in b.rows)
            head = "<tr>" + "".join(f"<th>{_inline(h)}</th>" for h in b.header) + "</tr>"
            caption = f"<caption>{_inline(b.caption)}</caption>" if b.caption else ""
            parts.append(f"<table>{caption}<thead>{head}</thead><tbody>{rows}</tbody></table>")
        elif isinstance(b, FigureBlock):
            f = b.figure
            data = base64.b64encode(f.png.read_bytes()).decode("ascii")
            alt = html.escape(f"Figure {b.number}: {f.title}", quote=True)
            parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{alt}">'
                         f"<figcaption>Figure {b.number}. {_inline(f.caption)}</figcaption></figure>")
    parts += ["</body>", "</html>"]
    return "\n".join(parts) + "\n"


def write_report(results: dict[str, Any], out_dir: str | os.PathLike[str]) -> list[Path]:
    """Write ``out_dir/figures/*.png|pdf``, ``out_dir/report.md`` and ``out_dir/report.html``; return the paths.

    Reads only the results dict (see :func:`validate_results` for its shape). Every file is written
    atomically; figures whose data is missing are skipped.
    """
    validate_results(results)
    out = Path(out_dir)
    figs = F.make_figures(results, out / "figures")
    report = build_report(results, figs)
    md_path, html_path = out / "report.md", out / "report.html"
    fileio.write_text(md_path, render_markdown(report, out))
    fileio.write_text(html_path, render_html(report))
    written = [p for f in figs for p in (f.png, f.pdf)]
    return written + [md_path, html_path]
