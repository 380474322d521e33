"""The report's text and tables, built from a :class:`~peanchor.results.records.Results` as a
:class:`~peanchor.report.document.Report`.

Every sentence about the results is generated from comparisons of the numbers (:mod:`peanchor.report.summary`), so
the prose says what these numbers show and nothing more; the paper's numbers come from :mod:`peanchor.settings.conditions`
and are labelled as the paper's.

Imports: :mod:`peanchor.report` (summary, cells, claims, evidence, provenance, document, lenses, dose_response,
resolution),
:mod:`peanchor.settings.conditions`, :mod:`peanchor.results.records`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from peanchor.settings.conditions import CONDITIONS, PAPER, label, ordered
from peanchor.report.cells import condition_cell, sweep_cell
from peanchor.report.claims import MIN_POINTS, check_claims, claims_scope, model_correlation
from peanchor.report.evidence import DOES_NOT_REPLICATE, INCONCLUSIVE, NOT_MEASURED, REPLICATES
from peanchor.report.provenance import provenance_table, setting_text
from peanchor.report.document import Bullets, FigureBlock, FigureFile, Heading, Paragraph, Report, Table
from peanchor.report.dose_response import DOSE_INTRO, dose_sweeps, dose_table
from peanchor.report.lenses import lens_gaps, lens_intro, lens_sentences, lens_table
from peanchor.report.resolution import RESOLUTION_INTRO, resolution_sentences, resolution_sizes, resolution_tables
from peanchor.report.summary import (
    MIN_SEEDS_FOR_CLAIMS,
    N_BOOT,
    Summary,
    finite,
    fmt,
    metric_getters,
    models_by_condition,
    paired_differences,
    shift_keys,
    summarise,
)
from peanchor.results.records import Results, SweepRow

__all__ = ["build_report"]

ALPHA = 0.05  # significance level used in the generated sentences
REFERENCE = {name: c.reference for name, c in CONDITIONS.items() if c.reference is not None}
SWEEP_REFERENCE = {name: c.alpha_sweep for name, c in CONDITIONS.items() if c.alpha_sweep is not None}


def _fmt_p(p: Any) -> str:
    if not finite(p):
        return "—"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _describe_shift(spec: dict[str, Any]) -> str:
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


def _sweep_by_condition(results: Results) -> dict[str, list[SweepRow]]:
    points = [p for p in results.alpha_sweep if finite(p.alpha)]
    return {c: [p for p in points if p.condition == c] for c in ordered(p.condition for p in points)}


class _Builder:
    def __init__(self, results: Results, figures: list[FigureFile], study_doc: str | None) -> None:
        self.r = results
        anchor = "#which-of-the-papers-claims-a-run-replicates"
        self.study_link = f"[docs/study.md]({study_doc}{anchor})" if study_doc else "docs/study.md in peanchor's source"
        self.groups = models_by_condition(results)
        self.shifts = shift_keys(results)
        self.sweeps = _sweep_by_condition(results)
        self.figures = {f.key: f for f in figures}
        self.figure_count = 0
        self.getters = metric_getters(self.shifts)
        self.summaries: dict[str, dict[str, Summary]] = {
            c: {key: summarise([get(m) for m in ms]) for key, _, get in self.getters} for c, ms in self.groups.items()
        }
        self.setting = setting_text(results)
        title = f"peanchor report: {self.setting}" + (f" (preset {results.preset})" if results.preset else "")
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
        pairs = [(c, self.mean(c, key)) for c in self.groups if finite(self.mean(c, key))]
        return sorted(pairs, key=lambda p: p[1])

    # -- sections
    def provenance(self) -> None:
        if self.groups:
            self.doc.add(Heading(2, "What was run"), provenance_table(self.r))

    def intro(self) -> None:
        n_models = len(self.r.models)
        conds = ", ".join(f"{_c(c)} (n={self.seeds(c)})" for c in self.groups) or "none"
        self.doc.add(Paragraph(
            f"{n_models} model{'s' if n_models != 1 else ''} on {self.setting}; conditions (seeds): {conds}. "
            "SSDC is the Spearman correlation between token similarity and negative grid distance, per layer; "
            "RPI shuffles the patch tokens at inference while the positional encodings stay on their slots; "
            "ΔSSDC = SSDC(layer 1) − SSDC(layer 0) under RPI; the Fragility Score is FS = 1 − A_shift / A_clean."
        ))  # fmt: skip
        self.doc.add(Paragraph(self.sample_size_sentence()))

    def has_intervals(self) -> bool:
        """Whether any model's analysis recorded an interval (older files have none)."""
        return any(m.clean_acc_ci or m.delta_ssdc_ci or m.ssdc.rpi_ci for m in self.r.models)

    def sample_size_sentence(self) -> str:
        counts = {c: self.seeds(c) for c in self.groups}
        if not counts:
            return "No models were evaluated: no claims."
        few = {c: n for c, n in counts.items() if n < MIN_SEEDS_FOR_CLAIMS}
        if not few:
            return (f"Every condition has at least {min(counts.values())} seeds; intervals in brackets are 95% percentile "
                    f"bootstrap CIs of the mean over seeds ({N_BOOT:,} resamples).")  # fmt: skip
        if len(few) == len(counts):
            top = max(counts.values())
            if top == 1 and not self.has_intervals():
                return ("n = 1 seed per condition: every number is one trained model, and these analyses recorded no "
                        "intervals (an older peanchor made them), so a claim that needs one is inconclusive; analyse "
                        "again with this peanchor for intervals over the images.")  # fmt: skip
            if top == 1:
                return ("n = 1 seed per condition: every number is one trained model. Intervals in brackets are the "
                        "analysis's own (a bootstrap over images, and over permutations under RPI): they say how "
                        "precisely these models were measured, not how another seed would differ.")  # fmt: skip
            return (f"n≤{top} seeds per condition: no significance claims; ± is the std over the seeds and no intervals are "
                    f"given below {MIN_SEEDS_FOR_CLAIMS} seeds.")  # fmt: skip
        listed = ", ".join(f"{_c(c)} n={n}" for c, n in few.items())
        return (f"Conditions with fewer than {MIN_SEEDS_FOR_CLAIMS} seeds ({listed}): no significance claims for them. "
                "Intervals in brackets are 95% bootstrap CIs of the mean for the others.")  # fmt: skip

    def findings(self) -> None:
        items: list[str] = []
        acc = self.ranked("clean_acc")
        if len(acc) >= 2:
            items.append(f"Clean accuracy is highest for {_c(acc[-1][0])} ({fmt(acc[-1][1])}) and lowest for "
                         f"{_c(acc[0][0])} ({fmt(acc[0][1])}).")  # fmt: skip
        elif acc:
            items.append(f"Clean accuracy of {_c(acc[0][0])}: {fmt(acc[0][1])}.")
        for k in self.shifts:
            fs = self.ranked(f"fs_{k}")
            if len(fs) >= 2:
                items.append(f"FS ({k}) is lowest, i.e. most robust, for {_c(fs[0][0])} ({fmt(fs[0][1])}) and highest "
                             f"for {_c(fs[-1][0])} ({fmt(fs[-1][1])}).")  # fmt: skip
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
            items.append(f"Under RPI, the highest SSDC over layers (mean over seeds) ranges from {fmt(peak[0][1])} "
                         f"({_c(peak[0][0])}) to {fmt(peak[-1][1])} ({_c(peak[-1][0])}).")  # fmt: skip
        delta = self.ranked("delta_ssdc")
        if len(delta) >= 2:
            items.append(f"ΔSSDC is largest for {_c(delta[-1][0])} ({fmt(delta[-1][1])}) and smallest for "
                         f"{_c(delta[0][0])} ({fmt(delta[0][1])}).")  # fmt: skip
        items += self.alpha_sentences()  # the ΔSSDC–FS correlation is said once, in its own section
        if items:
            self.doc.add(Heading(2, "What the numbers show"), Bullets(items))

    def main_table(self) -> None:
        if not self.groups:
            return
        header = ["condition", "n"] + [name for _, name, _ in self.getters]
        rows = [[label(c), str(self.seeds(c))] + [condition_cell(self.groups[c], key, self.summaries[c][key])
                                                  for key, _, _ in self.getters] for c in self.groups]  # fmt: skip
        self.doc.add(Heading(2, "Results per condition"), Table(
            header, rows,
            "mean ± std over seeds; [95% bootstrap CI of the mean] when n ≥ 3; with one seed, [the analysis's own 95% "
            "interval] where it recorded one. FS = 1 − A_shift/A_clean (lower is more robust), undefined when the "
            "clean accuracy is not above chance; max SSDC (RPI) is each model's highest SSDC over layers under "
            "RPI."))  # fmt: skip
        self.figure("ssdc_per_layer")
        notes = [f"{label(c)}: {CONDITIONS[c].ssdc_note}" for c in self.groups if c in CONDITIONS and CONDITIONS[c].ssdc_note]
        if notes and "ssdc_per_layer" in self.figures:
            self.doc.add(Paragraph(f"For comparison, the paper's SSDC per layer under RPI ({PAPER.label}):"),
                         Bullets(notes))  # fmt: skip

    def lenses_section(self) -> None:
        table, gaps = lens_table(self.r), lens_gaps(self.r)
        if table is None and not gaps:
            return
        self.doc.add(Heading(2, "Lenses on spatial structure"))
        if table is not None:
            self.doc.add(Paragraph(lens_intro(self.r)))
            self.figure("lenses_per_layer")
            self.doc.add(table)
        sentences = (lens_sentences(self.r) if table is not None else []) + gaps
        if sentences:
            self.doc.add(Bullets(sentences))
        self.figure("attention_distance_heads")

    def dose_section(self) -> None:
        sweeps = dose_sweeps(self.r)
        if not sweeps:
            return
        self.doc.add(Heading(2, "Dose-response sweeps"), Paragraph(DOSE_INTRO))
        for i, text in enumerate(sweeps, start=1):
            self.figure(f"dose_response_{i}")
            self.doc.add(dose_table(self.r, text))

    def resolution_section(self) -> None:
        if resolution_sizes(self.r):
            self.doc.add(Heading(2, "Other resolutions"), Paragraph(RESOLUTION_INTRO))
            self.figure("resolution")
            self.doc.add(*resolution_tables(self.r), *([Bullets(b)] if (b := resolution_sentences(self.r)) else []))

    def paper_comparison(self) -> None:
        conds = list(self.groups) + [c for c in REFERENCE if c not in self.groups]
        # The paper measured JPEG and blur: those of ours that share a name with them sit beside its numbers.
        metrics = [("clean_acc", "clean acc")] + [(f"fs_{k}", f"FS {k}") for k in PAPER.shifts if k in self.shifts]
        header = ["condition", "n (ours)"]
        for _, name in metrics:
            header += [f"{name} (ours)", f"{name} ({PAPER.label})"]
        rows = []
        for c in conds:
            row = [label(c), str(self.seeds(c))]
            for key, _ in metrics:
                ours = self.summaries.get(c, {}).get(key)
                ref = REFERENCE[c].get(key) if c in REFERENCE else None
                row += [ours.cell() if ours else "—", f"{ref.mean:.4f} ± {ref.std:.4f}" if ref else "—"]
            rows.append(row)
        self.doc.add(Heading(2, f"Ours beside the paper ({PAPER.label})"), Table(
            header, rows, f"paper: mean ± std over {PAPER.seeds} seeds; {PAPER.model} at {PAPER.img_size} px; shifts "
            f"{', '.join(_describe_shift(spec) for spec in PAPER.shifts.values())}."))  # fmt: skip
        differences = self.setting_differences()
        if differences:
            self.doc.add(Paragraph(
                f"Note: our setting differs from the paper's ({'; '.join(differences)}), so the absolute numbers are not "
                "comparable; compare the orderings of the conditions."))  # fmt: skip
        for key, name in metrics:
            sentence = self.ordering_sentence(key, name)
            if sentence:
                self.doc.add(Paragraph(sentence))

    def setting_differences(self) -> list[str]:
        out = []
        dataset = str(self.r.dataset or "")
        if re.sub(r"[^a-z0-9]", "", dataset.lower()) != re.sub(r"[^a-z0-9]", "", PAPER.dataset.lower()):
            out.append(f"dataset {dataset or 'unknown'} instead of {PAPER.dataset}")
        if self.r.img_size != PAPER.img_size:
            out.append(f"{self.r.img_size if self.r.img_size else 'unknown'} px images instead of {PAPER.img_size} px")
        for k, spec in PAPER.shifts.items():
            if k in self.r.shifts and self.r.shifts[k] != spec:
                out.append(f"{k} shift {_describe_shift(self.r.shifts[k])} instead of {_describe_shift(spec)}")
        return out

    def ordering_sentence(self, key: str, name: str) -> str | None:
        shared = [c for c in REFERENCE if c in self.groups and finite(self.mean(c, key))]
        if len(shared) < 2:
            return None

        def paper(c: str) -> float:
            ref = REFERENCE[c].get(key)
            assert ref is not None
            return ref.mean

        ours = sorted(shared, key=lambda c: self.mean(c, key))
        theirs = sorted(shared, key=paper)
        pairs = [(a, b) for i, a in enumerate(shared) for b in shared[i + 1 :]]
        agree = sum((self.mean(a, key) - self.mean(b, key)) * (paper(a) - paper(b)) > 0 for a, b in pairs)
        return (f"{name}, lowest to highest: ours {' < '.join(_c(c) for c in ours)}; paper "
                f"{' < '.join(_c(c) for c in theirs)}. {agree} of {len(pairs)} pairs of conditions are ordered as in "
                "the paper.")  # fmt: skip

    def shifts_section(self) -> None:
        shifts, sources = self.r.shifts, self.r.shift_sources or {}
        keys = list(shifts) + [k for k in PAPER.shifts if k not in shifts]
        rows = [[k, _describe_shift(shifts[k]) if k in shifts else "—",
                 _describe_shift(PAPER.shifts[k]) if k in PAPER.shifts else "—"] for k in keys]  # fmt: skip
        header = ["shift", "ours", PAPER.label]
        if sources:  # where each of ours came from: the preset, a --shift, or the resolution rule
            header.insert(2, "from")
            for row, k in zip(rows, keys):
                row.insert(2, sources.get(k, "—"))
        self.doc.add(Heading(2, "Shifts"), Table(header, rows,
                                                 "applied to uint8 images after the resize, before normalisation."))
        if self.r.severity_table:
            self.doc.add(Paragraph(f"Severity sweeps use the {self.r.severity_table} table."))

    def paired_section(self) -> None:
        rows, sentences = [], []
        for d in paired_differences(self.r):
            ci = f"[{fmt(d.ci_low, signed=True)}, {fmt(d.ci_high, signed=True)}]" if d.claim else "—"
            rows.append([label(d.condition), d.shift, str(d.n), fmt(d.mean_diff, signed=True), ci,
                         _fmt_p(d.p_value) if d.claim else "—"])  # fmt: skip
            direction = "lower" if d.mean_diff < 0 else "higher"
            text = (f"{_c(d.condition)} vs `none`, FS ({d.shift}): {direction} by {fmt(abs(d.mean_diff))} on average "
                    f"over {d.n} paired seed{'s' if d.n > 1 else ''}")  # fmt: skip
            if not d.claim:
                text += f"; n={d.n}: no significance claim."
            else:
                excludes = d.ci_low > 0 or d.ci_high < 0
                text += (f"; the 95% bootstrap CI {ci} {'excludes' if excludes else 'includes'} 0, sign-flip "
                         f"p = {_fmt_p(d.p_value)}")  # fmt: skip
                if excludes and d.p_value <= d.p_floor + 1e-12 and d.p_floor >= ALPHA:
                    text += (f", the smallest p {d.n} pairs allow: every seed points the same way, but a test at "
                             f"the {ALPHA:g} level needs {math.ceil(math.log2(2 / ALPHA))} seeds or more.")  # fmt: skip
                elif excludes:
                    text += "."
                else:
                    text += ", so no clear difference."
            sentences.append(text)
        if not rows:
            return
        if max(d.n for d in paired_differences(self.r)) == 1:  # one pair each: a table of one number and dashes
            self.doc.add(Heading(2, "Fragility against `none`, paired by seed"), Paragraph(
                f"One seed per condition: there is one pair with `none` each, and a paired test over seeds needs at "
                f"least {MIN_SEEDS_FOR_CLAIMS}. The FS of each model, with its interval over images where the analysis "
                "recorded one, is in the tables above; the claim on fragility reads those intervals."))  # fmt: skip
            return
        self.doc.add(Heading(2, "Fragility against `none`, paired by seed"), Table(
            ["condition", "shift", "pairs", "mean FS diff (condition − none)", "95% CI", "p"], rows,
            f"95% CI: percentile bootstrap of the paired differences over seeds ({N_BOOT:,} resamples); p: the "
            f"two-sided sign-flip permutation test of the pairs (exact up to {int(math.log2(N_BOOT))} pairs); negative "
            f"= more robust than `none`; CI and p only with ≥ {MIN_SEEDS_FOR_CLAIMS} pairs."),
            Bullets(sentences))  # fmt: skip

    def alpha_sentences(self) -> list[str]:
        out = []
        for c, pts in self.sweeps.items():
            hi, lo = max(p.alpha for p in pts), min(p.alpha for p in pts)
            if hi == lo:
                continue

            def at(alpha: float, get: Callable[[SweepRow], Any]) -> float:
                vals = [get(p) for p in pts if abs(p.alpha - alpha) < 1e-9 and finite(get(p))]
                return sum(vals) / len(vals) if vals else math.nan

            parts = []
            d_hi, d_lo = at(hi, lambda p: p.delta_ssdc), at(lo, lambda p: p.delta_ssdc)
            if finite(d_hi) and finite(d_lo):
                parts.append(f"ΔSSDC goes from {fmt(d_hi)} to {fmt(d_lo)}")
            for k in self.shifts:
                f_hi, f_lo = at(hi, lambda p, k=k: p.fragility.get(k)), at(lo, lambda p, k=k: p.fragility.get(k))
                if finite(f_hi) and finite(f_lo):
                    parts.append(f"FS ({k}) from {fmt(f_hi)} to {fmt(f_lo)}")
            if parts:
                out.append(f"{_c(c)}: as α falls from {hi:g} to {lo:g}, " + " and ".join(parts) + ".")
        return out

    def alpha_section(self) -> None:
        if not self.sweeps:
            return
        header = ["condition", "α", "n", "ΔSSDC", "clean acc"] + [f"FS {k}" for k in self.shifts]
        header += [f"ΔSSDC ({PAPER.label})", f"FS jpeg ({PAPER.label})"]
        rows = []
        for c, pts in self.sweeps.items():
            for alpha in sorted({round(p.alpha, 6) for p in pts}, reverse=True):
                at = [p for p in pts if abs(p.alpha - alpha) < 1e-9]
                row = [label(c), f"{alpha:g}", str(len(at)), sweep_cell(at, "delta_ssdc"), sweep_cell(at, "clean_acc")]
                row += [sweep_cell(at, f"fs_{k}") for k in self.shifts]
                ref = SWEEP_REFERENCE[c].at(alpha) if c in SWEEP_REFERENCE else None
                row += [f"{ref[0]:.2f}", f"{ref[1]:.3f}"] if ref else ["—", "—"]
                rows.append(row)
        self.doc.add(Heading(2, "α sweep"), Paragraph(
            "The PE is multiplied by α at inference without retraining. FS uses clean and shifted accuracy both measured "
            "at that α with RPI off; ΔSSDC is measured with RPI on."))  # fmt: skip
        self.figure("alpha_sweep")
        seeds = "; ".join(f"{CONDITIONS[c].paper_name} {r.seeds} seed{'s' if r.seeds > 1 else ''}"
                          + ("" if len(r.alpha) > 2 else ", endpoints only") for c, r in SWEEP_REFERENCE.items())  # fmt: skip
        self.doc.add(Table(header, rows, f"mean ± std over seeds (one seed: [its analysis's own 95% interval] where "
                                         f"recorded). Paper columns: {seeds}."))  # fmt: skip

    def correlation_section(self) -> None:
        shift, rho, left = model_correlation(self.r)
        if shift is None or not self.r.models:
            return
        self.doc.add(Heading(2, "ΔSSDC against Fragility"))
        if rho.n >= MIN_POINTS:
            text = (f"Over the {rho.n} trained models at α = 1, one point each, Spearman ρ(ΔSSDC, FS {shift}) = "
                    f"{rho.text(2, True)} (95% Fisher-z interval). The paper's claim (more index-anchored structure, "
                    "less fragility) predicts a negative ρ.")  # fmt: skip
        else:
            text = (f"{rho.n} trained model(s) with a defined FS ({shift}): too few (fewer than {MIN_POINTS}) for an "
                    "interval of their rank correlation.")  # fmt: skip
        text += (" The α-sweep points are drawn too, but they are not pooled into the correlation: the points of one "
                 "model at several α are one sample, not several (their trend is read in the α sweep).")  # fmt: skip
        if left:
            text += f" Left out: {'; '.join(left)}."
        self.doc.add(Paragraph(text))
        self.figure("delta_ssdc_vs_fs")

    def severity_section(self) -> None:
        rows = []
        for c, ms in self.groups.items():
            kinds = list(dict.fromkeys(k for m in ms for k in (m.severity_fragility or {})))
            for k in kinds:
                series = [m.severity_fragility[k] for m in ms if m.severity_fragility and k in m.severity_fragility]
                length = max(len(s) for s in series)
                cells = [summarise([s[i] if i < len(s) else None for s in series]).cell() for i in range(length)]
                rows.append([label(c), k, str(len(series))] + cells)
        if not rows:
            return
        width = max(len(r) for r in rows) - 3
        rows = [r + ["—"] * (width + 3 - len(r)) for r in rows]
        table = self.r.severity_table
        self.doc.add(Heading(2, "Severity sweeps"), Paragraph(
            "Fragility Score at corruption severities 1–5" + (f" from the {table} table" if table else "")
            + " (the accuracies are in results.json)."))
        self.figure("severity_curves")
        self.doc.add(Table(["condition", "shift", "n"] + [f"FS sev {i + 1}" for i in range(width)], rows,
                           "mean ± std over seeds."))  # fmt: skip

    def models_table(self) -> None:
        models = [m for ms in self.groups.values() for m in ms]
        if not models:
            return
        header = ["model", "condition", "seed", "clean acc"] + [f"FS {k}" for k in self.shifts]
        header += ["max SSDC (RPI)", "ΔSSDC", "epochs", "train time"]
        rows = []
        for m in models:
            secs = m.train.seconds
            rows.append([m.name, m.condition, str(m.seed), fmt(m.clean_acc)]
                        + [condition_cell([m], f"fs_{k}", summarise([m.fragility.get(k)])) for k in self.shifts]
                        + [fmt(m.ssdc.max_rpi()), fmt(m.delta_ssdc), str(m.train.epochs if m.train.epochs is not None else "—"),
                           _duration(secs) if finite(secs) else "—"])  # fmt: skip
        self.doc.add(Heading(2, "Every model"), Table(header, rows))

    def failed_section(self) -> None:
        if not self.r.failed:
            return
        items = [f"`{f.name}`: {f.error or 'no error recorded'}" for f in self.r.failed]
        self.doc.add(Heading(2, "Failed"), Paragraph(f"{len(items)} run(s) failed and are not in the numbers above:"),
                     Bullets(items))  # fmt: skip

    def run_section(self) -> None:
        wall = self.r.wall_seconds
        text = f"Total wall time: {_duration(wall)}." if finite(wall) else "Wall time was not recorded."
        self.doc.add(Heading(2, "Run"), Paragraph(text + f" Reference numbers: {PAPER.citation}."))

    def claims_section(self) -> None:
        claims = check_claims(self.r)
        if all(c.verdict == NOT_MEASURED for c in claims):
            return
        self.doc.add(Heading(2, "Which of the paper's claims replicate here"), Paragraph(
            "Each claim of the paper is checked against a fixed threshold, read from an interval: it *replicates* when "
            "the interval clears the threshold on the claim's side, *does not replicate* when the interval lies on the "
            f"other side, and is *inconclusive* otherwise (the thresholds, and why: {self.study_link}). "
            f"{claims_scope(self.r)}"))  # fmt: skip
        for verdict in (REPLICATES, DOES_NOT_REPLICATE, INCONCLUSIVE):
            items = [f"**{c.title}.** {c.statement} {c.evidence}." for c in claims if c.verdict == verdict]
            if items:
                self.doc.add(Paragraph(f"{verdict.capitalize()}:"), Bullets(items))
        unmeasured = [c.title for c in claims if c.verdict == NOT_MEASURED]
        if unmeasured:
            self.doc.add(Paragraph(f"Not measured by these results: {'; '.join(unmeasured)}."))

    def build(self) -> Report:
        for section in (self.provenance, self.intro, self.claims_section, self.findings, self.main_table, self.lenses_section,
                        self.dose_section, self.resolution_section, self.paper_comparison, self.shifts_section, self.paired_section, self.alpha_section,
                        self.correlation_section, self.severity_section, self.models_table, self.failed_section,
                        self.run_section):  # fmt: skip
            section()
        return self.doc


def build_report(results: Results, figures: list[FigureFile] | None = None, study_doc: str | None = None) -> Report:
    """The report as blocks (figures already drawn, or none); ``study_doc`` is where the report links
    docs/study.md (None: named, not linked)."""
    return _Builder(results, figures or [], study_doc).build()
