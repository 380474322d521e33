"""Report: figures and report files from a synthetic results dict; errors for bad result files; the paper's
reference numbers."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
from PIL import Image
from scipy import stats

from peanchor.core.errors import PeanchorError
from peanchor.report import build_report, render_markdown, write_report
from peanchor.report.figures import make_figures
from peanchor.report.claims import model_correlation
from peanchor.report.summary import correlation_points
from peanchor.results.records import SCHEMA_VERSION, read_results, results_from_dict, write_results

LAYERS = 4
ALPHAS = (1.0, 0.7, 0.4, 0.1)


def synthetic_results(seeds=(0, 1), conditions=("none", "ape")) -> dict:
    """results.json content (peanchor.results.records.Results): conditions × seeds, an α sweep, severities."""
    models, sweep = [], []
    for ci, cond in enumerate(conditions):
        anchored = cond != "none"
        for seed in seeds:
            jitter = 0.01 * (seed + 1) + 0.001 * ci
            rpi = [0.05 + jitter, 0.55 - jitter, 0.45, 0.30] if anchored else [0.0, 0.01 + jitter, 0.0, -0.01]
            clean = 0.80 + jitter if anchored else 0.70 + jitter
            fs = {"jpeg": 0.25 + jitter if anchored else 0.48 + jitter, "blur": 0.12 + jitter if anchored else 0.35 + jitter}
            name = f"{cond}-s{seed}"
            models.append({
                "name": name, "condition": cond, "pe": cond, "rpt": False, "seed": seed, "clean_acc": round(clean, 4),
                "rpi_acc": round(clean - 0.3, 4),
                "ssdc": {"normal": [0.60, 0.62 + jitter, 0.58, 0.50], "rpi": rpi, "rpi_std": [0.01] * LAYERS},
                "delta_ssdc": round(rpi[1] - rpi[0], 4),
                "acc": {k: round(clean * (1 - v), 4) for k, v in fs.items()},
                "fragility": {k: round(v, 4) for k, v in fs.items()},
                "severities": {"jpeg": [clean - 0.05 * s for s in range(1, 6)], "blur": [clean - 0.04 * s for s in range(1, 6)]},
                "severity_fragility": {"jpeg": [0.05 * s / clean for s in range(1, 6)],
                                       "blur": [0.04 * s / clean for s in range(1, 6)]},
                "train": {"val_acc": clean, "seconds": 61.5, "epochs": 3},
            })
            if anchored:
                for alpha in ALPHAS:
                    d = round((rpi[1] - rpi[0]) * alpha, 4)
                    sweep.append({"model": name, "condition": cond, "seed": seed, "alpha": alpha, "delta_ssdc": d,
                                  "ssdc_rpi": [rpi[0], rpi[0] + d], "clean_acc": clean, "acc": {"jpeg": 0.5, "blur": 0.6},
                                  "fragility": {"jpeg": round(0.5 - 0.3 * alpha + jitter, 4), "blur": round(0.3 - 0.2 * alpha, 4)}})
    return {
        "schema": "peanchor.results.records", "schema_version": SCHEMA_VERSION, "preset": "cpu", "dataset": "scenes", "img_size": 32,
        "shifts": {"jpeg": {"kind": "jpeg", "quality": 58}, "blur": {"kind": "blur", "kernel_size": 7, "sigma": 0.7}},
        "models": models, "alpha_sweep": sweep,
        "failed": [{"name": "rope-s0", "error": "TrainingDiverged: loss became nan at step 12"}],
        "wall_seconds": 3723.0, "some_future_key": {"ignored": True},
    }


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    results = synthetic_results()
    paths = write_report(results_from_dict(results), out)
    return out, results, paths


def test_every_figure_exists_as_png_and_pdf(written):
    out, _, paths = written
    stems = {"ssdc_per_layer", "alpha_sweep", "delta_ssdc_vs_fs", "severity_curves"}
    for stem in stems:
        for ext in ("png", "pdf"):
            p = out / "figures" / f"{stem}.{ext}"
            assert p in paths and p.stat().st_size > 1000
    assert (out / "figures" / "ssdc_per_layer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "figures" / "alpha_sweep.pdf").read_bytes()[:5] == b"%PDF-"
    assert paths[-2:] == [out / "report.md", out / "report.html"]
    assert not [p for p in out.rglob(".*")]  # no temporaries left behind


def test_markdown_references_resolve(written):
    out, _, _ = written
    md = (out / "report.md").read_text()
    refs = re.findall(r"\]\(([^)]+)\)", md)
    assert len(refs) == 9  # 4 figures, PNG + PDF each, and docs/study.md where the claims' rules are
    for ref in refs:
        path = ref.partition("#")[0]
        assert not ref.startswith(("/", "http")) and (out / path).is_file(), ref
    assert sum(r.partition("#")[0].endswith("docs/study.md") for r in refs) == 1


def test_html_is_self_contained(written):
    out, _, _ = written
    page = (out / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert "<link" not in page and "<script" not in page and "@import" not in page and "url(" not in page
    sources = re.findall(r"""src="([^"]+)\"""", page)
    assert len(sources) == 4 and all(s.startswith("data:image/png;base64,") for s in sources)
    assert "<table>" in page


def test_tables_contain_the_numbers(written):
    out, results, _ = written
    md = (out / "report.md").read_text()
    page = (out / "report.html").read_text()
    ape = [m for m in results["models"] if m["condition"] == "ape"]
    mean_clean = sum(m["clean_acc"] for m in ape) / len(ape)
    for text in (md, page):
        assert f"{mean_clean:.3f} ± " in text  # ours, mean ± std over the 2 seeds
        for m in results["models"]:  # every model's own row
            assert f"{m['clean_acc']:.3f}" in text and m["name"] in text
        assert "0.6406 ± 0.0018" in text and "0.4347 ± 0.0132" in text  # the paper's, beside ours
        assert "paper, ImageNet-100" in text
        assert "quality=58" in text and "quality=5)" in text  # shift parameters, ours and the paper's
        assert "n≤2 seeds per condition: no significance claims" in text
        assert "Spearman" in text and "ρ" in text
        assert "TrainingDiverged" in text  # the Failed section
        assert "1 h 02 min 03 s" in text
    assert "Note: our setting differs from the paper's (dataset scenes" in md
    assert "## Failed" in md and "paired by seed" in md


def markdown(results: dict) -> str:
    """The report text without drawing figures (fast)."""
    return render_markdown(build_report(results_from_dict(results)), ".")


def test_generated_prose_follows_the_numbers():
    results = synthetic_results(seeds=(0, 1, 2))
    md = markdown(results)
    assert "FS (jpeg) is lowest, i.e. most robust, for `ape`" in md
    assert "1 of 1 other conditions have a lower mean FS (jpeg) than `none`" in md
    assert "Every condition has at least 3 seeds" in md
    assert re.search(r"`ape` vs `none`, FS \(jpeg\): lower by 0\.229 .* excludes 0", md)
    # three seeds that all point the same way: the sign-flip p is at its floor 2/2**3, and the report says so
    assert re.search(r"`ape` vs `none`, FS \(jpeg\): .* sign-flip p = 0\.250, the smallest p 3 pairs allow: .* needs 6 "
                     r"seeds or more", md)  # fmt: skip
    six = markdown(synthetic_results(seeds=tuple(range(6))))
    assert re.search(r"`ape` vs `none`, FS \(jpeg\): .* excludes 0, sign-flip p = 0\.031\.", six)
    # flip the data: the sentences flip with it
    for m in results["models"]:
        if m["condition"] == "ape":
            m["fragility"]["jpeg"] += 0.5
    flipped = markdown(results)
    assert "FS (jpeg) is lowest, i.e. most robust, for `none`" in flipped
    assert "0 of 1 other conditions have a lower mean FS (jpeg) than `none`" in flipped


def test_every_measured_shift_is_in_every_table(tmp_path, written):
    """A shift beyond the paper's two (here `--shift contrast:...`) appears in the per-condition, α-sweep, severity,
    paired and per-model tables, in the shifts table with its source, and in the figures' panels."""
    results = synthetic_results()
    results["shifts"]["contrast"] = {"kind": "contrast", "factor": 0.3}
    results["shift_sources"] = {"jpeg": "preset cpu", "blur": "preset cpu", "contrast": "--shift contrast:factor=0.3"}
    for m in results["models"]:
        m["fragility"]["contrast"] = round(m["fragility"]["blur"] + 0.2, 4)
        m["acc"]["contrast"] = round(m["clean_acc"] * (1 - m["fragility"]["contrast"]), 4)
        m["severities"]["contrast"] = [m["clean_acc"] - 0.03 * s for s in range(1, 6)]
        m["severity_fragility"]["contrast"] = [0.03 * s / m["clean_acc"] for s in range(1, 6)]
    for p in results["alpha_sweep"]:
        p["fragility"]["contrast"], p["acc"]["contrast"] = 0.4, 0.5
    md = markdown(results)
    assert "| condition | n | clean acc | FS jpeg | FS blur | FS contrast | max SSDC (RPI) | ΔSSDC |" in md
    assert "| condition | α | n | ΔSSDC | clean acc | FS jpeg | FS blur | FS contrast |" in md
    assert "| model | condition | seed | clean acc | FS jpeg | FS blur | FS contrast |" in md
    assert "| contrast | contrast(factor=0.3) | --shift contrast:factor=0.3 | — |" in md
    assert "| blur | blur(kernel_size=7, sigma=0.7) | preset cpu | blur(kernel_size=5, sigma=2.5) |" in md
    assert re.search(r"\| ape \| contrast \| 2 \| -0\.229 \|", md)  # paired against none
    assert re.search(r"\| ape \| contrast \| 2 \| 0\.\d+ ± ", md)  # severity table
    assert "FS (contrast) is lowest" in md
    # the figures: one α-sweep panel and one severity panel per shift
    figures = {f.key: f for f in make_figures(results_from_dict(results), tmp_path)}

    with Image.open(figures["alpha_sweep"].png) as four, Image.open(figures["severity_curves"].png) as three:
        with Image.open(written[0] / "figures" / "alpha_sweep.png") as fewer:  # jpeg and blur only
            assert four.width > fewer.width * 1.2  # ΔSSDC + 3 FS panels against ΔSSDC + 2
        assert three.width > 2.5 * three.height


def test_single_seed_and_missing_optional_parts(tmp_path):
    results = synthetic_results(seeds=(0,), conditions=("ape",))
    for key in ("alpha_sweep", "failed", "wall_seconds", "shifts", "preset"):
        results.pop(key)
    for m in results["models"]:
        m.pop("severities"), m.pop("severity_fragility")
        m.pop("train")
    paths = write_report(results_from_dict(results), tmp_path)
    names = {p.name for p in paths}
    assert "alpha_sweep.png" not in names and "severity_curves.png" not in names
    assert "ssdc_per_layer.png" in names
    md = (tmp_path / "report.md").read_text()
    assert "n = 1 seed per condition: every number is one trained model" in md
    assert "## Failed" not in md and "Wall time was not recorded" in md


def test_correlation_points_do_not_double_count_alpha_one():
    results = results_from_dict(synthetic_results())
    points = correlation_points(results)
    # none models (no sweep) + every sweep point; ape's own rows are replaced by their α = 1 sweep points
    assert len(points) == 2 + 2 * len(ALPHAS)
    assert sorted((p.model, p.alpha) for p in points) == sorted(
        [(m.name, 1.0) for m in results.models if m.condition == "none"]
        + [(p.model, p.alpha) for p in results.alpha_sweep]
    )
    # the correlation itself is over the trained models only, one point each (not the α points of one model)
    _, rho, _ = model_correlation(results)
    assert rho.n == len(results.models)


def test_results_round_trip_and_one_line_errors(tmp_path):
    results = results_from_dict(synthetic_results())
    write_results(results, tmp_path / "results.json")
    assert read_results(tmp_path / "results.json") == results
    assert read_results(tmp_path) == results  # a directory means DIR/results.json
    with pytest.raises(PeanchorError, match="no such results file"):
        read_results(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"models": [')
    with pytest.raises(PeanchorError, match="invalid JSON at line 1"):
        read_results(bad)
    good = synthetic_results()
    model = good["models"][0]
    cases = [
        ([], "JSON object"),
        ({"models": []}, "not a peanchor.results.records file"),  # an older peanchor's results.json: no schema fields
        ({**good, "schema": "peanchor.analysis"}, "not a peanchor.results.records file"),
        ({**good, "schema_version": 99}, f"schema_version 99, but this peanchor reads version {SCHEMA_VERSION}"),
        ({**good, "models": {}}, "models: Input should be a valid array"),
        ({**good, "models": [{k: v for k, v in model.items() if k != "condition"}]},
         r"models\[0\] is missing required key 'condition'"),
        ({**good, "models": [{**model, "clean_acc": "high"}]}, r"models\[0\]\.clean_acc"),
        ({**good, "alpha_sweep": [{"condition": "ape"}]}, r"alpha_sweep\[0\] is missing required key"),
    ]
    for i, (obj, message) in enumerate(cases):
        p = tmp_path / f"case{i}.json"
        p.write_text(json.dumps(obj))
        with pytest.raises(PeanchorError, match=message) as e:
            read_results(p)
        assert "\n" not in str(e.value)


# ---- the report's derived numbers against numpy and scipy -------------------------------------------


def _scipy_ci(values) -> tuple[float, float]:
    """The 95 % percentile bootstrap CI of the mean as scipy computes it (10,000 resamples, seed 0)."""
    import numpy as np

    ci = stats.bootstrap((np.asarray(values, dtype=float),), np.mean, n_resamples=10000, confidence_level=0.95,
                         method="percentile", rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
    return float(ci.low), float(ci.high)


def test_std_and_ci_cells_are_numpys_and_scipys():
    """Every mean ± std [CI] cell of the per-condition table, for 3 seeds, is numpy's mean and sample std and scipy's
    percentile bootstrap, formatted as the report prints them."""
    import numpy as np

    results = synthetic_results(seeds=(0, 1, 2))
    md = markdown(results)
    for cond in ("none", "ape"):
        ms = [m for m in results["models"] if m["condition"] == cond]
        for values in ([m["clean_acc"] for m in ms], [m["fragility"]["jpeg"] for m in ms], [m["delta_ssdc"] for m in ms]):
            low, high = _scipy_ci(values)
            cell = f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f} [{low:.3f}, {high:.3f}]"
            assert cell in md, (cond, cell)


def test_paired_differences_are_numpys_scipys_and_an_enumerated_sign_flip_test():
    """FS(condition) − FS(none) per seed: the mean is numpy's, the CI scipy's bootstrap of the differences, and the p
    every one of the 2^n sign flips counted here by hand."""
    import itertools

    import numpy as np

    from peanchor.report.summary import paired_differences

    results = synthetic_results(seeds=(0, 1, 2, 3))
    for m in results["models"]:  # differences that are not all alike, so the flips do not tie
        m["fragility"] = {k: v + 0.007 * m["seed"] ** 2 * (m["condition"] == "ape") for k, v in m["fragility"].items()}
    diffs = paired_differences(results_from_dict(results))
    assert {(d.condition, d.shift) for d in diffs} == {("ape", "jpeg"), ("ape", "blur")}
    for d in diffs:
        by_seed = {m["seed"]: m["fragility"][d.shift] for m in results["models"] if m["condition"] == "none"}
        diff = np.array([m["fragility"][d.shift] - by_seed[m["seed"]] for m in results["models"]
                         if m["condition"] == d.condition])  # fmt: skip
        assert d.n == 4 and d.mean_diff == pytest.approx(diff.mean(), abs=1e-12)
        assert (d.ci_low, d.ci_high) == pytest.approx(_scipy_ci(diff), abs=1e-12)
        flips = [abs(np.mean(diff * np.array(s))) >= abs(diff.mean()) - 1e-12 for s in itertools.product((1, -1), repeat=4)]
        assert d.p_value == pytest.approx(sum(flips) / len(flips), abs=1e-12)


def test_figure_error_bars_are_numpys_mean_and_std(tmp_path, monkeypatch):
    """The error bars the figures draw (SSDC per layer, the α sweep, the severity curves) are numpy's mean ± sample
    std over seeds of the numbers in the results."""
    import matplotlib.axes
    import numpy as np

    drawn: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    original = matplotlib.axes.Axes.errorbar

    def record(self, x, y, yerr=None, **kwargs):
        if yerr is not None:
            err = np.asarray(yerr, dtype=float)
            drawn.append((np.asarray(x, dtype=float), np.asarray(y, dtype=float), err if err.ndim == 1 else err[1]))
        return original(self, x, y, yerr=yerr, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "errorbar", record)
    results = synthetic_results(seeds=(0, 1, 2))
    make_figures(results_from_dict(results), tmp_path)

    def was_drawn(x, rows) -> bool:
        mean, std = np.mean(rows, axis=0), np.std(rows, axis=0, ddof=1)
        return any(len(dx) == len(x) and np.allclose(dx, x) and np.allclose(dy, mean, rtol=0, atol=1e-12)
                   and np.allclose(de, std, rtol=0, atol=1e-12) for dx, dy, de in drawn)  # fmt: skip

    for cond in ("none", "ape"):
        ms = [m for m in results["models"] if m["condition"] == cond]
        for mode in ("normal", "rpi"):
            assert was_drawn(np.arange(LAYERS), [m["ssdc"][mode] for m in ms]), (cond, mode)
        for kind in ("jpeg", "blur"):
            # the curve starts at severity 0 (clean), whose FS is 0 by definition
            assert was_drawn(np.arange(6), [[0.0] + m["severity_fragility"][kind] for m in ms]), (cond, kind)
    sweep = [p for p in results["alpha_sweep"] if p["condition"] == "ape"]
    alphas = sorted({p["alpha"] for p in sweep})
    fs = [[next(p["fragility"]["jpeg"] for p in sweep if p["alpha"] == a and p["seed"] == s) for a in alphas]
          for s in (0, 1, 2)]  # fmt: skip
    assert was_drawn(np.array(alphas), fs)


class _Page(HTMLParser):
    """The text of a page, with the open elements around each piece of it."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.texts: list[tuple[tuple[str, ...], str]] = []
        self.elements: list[tuple[tuple[str, ...], dict[str, str | None]]] = []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tuple(self.open) + (tag,), dict(attrs)))
        if tag not in ("img", "meta", "br"):
            self.open.append(tag)

    def handle_endtag(self, tag):
        assert self.open and self.open[-1] == tag, (self.open, tag)
        self.open.pop()

    def handle_data(self, data):
        if data.strip() and "style" not in self.open and "title" not in self.open:
            self.texts.append((tuple(self.open), data))

    def inside(self, parent: str, tag: str) -> bool:
        return any(path[-1] == tag and parent in path[:-1] for path, _ in self.elements)


def parse_page(page: str) -> _Page:
    parser = _Page()
    parser.feed(page)
    parser.close()
    assert not parser.open, parser.open  # every element closed
    return parser


def test_html_renders_the_reports_markdown_with_no_markers_left(written):
    """The claims' bold statements, the conditions' `code` names: rendered in list items, paragraphs and cells."""
    out, _, _ = written
    page = parse_page((out / "report.html").read_text())
    stray = [(path, text) for path, text in page.texts if "**" in text or "`" in text]
    assert not stray, stray[:3]
    md = (out / "report.md").read_text()
    assert "- **" in md and "`ape`" in md  # the Markdown the page renders does carry the markup
    assert page.inside("li", "strong") and page.inside("li", "code") and page.inside("p", "code")
    strong = {text for path, text in page.texts if path[-2:] == ("li", "strong")}
    assert any(s.startswith("Content-driven structure without a PE") for s in strong), strong


def test_html_inline_markup_renders_in_every_kind_of_block_and_raw_html_stays_text():
    from peanchor.report.document import Bullets, Heading, Paragraph, Report, Table
    from peanchor.report.html import render_html

    text = "a **bold** word, `code`, a [link](docs/study.md) and <b>not markup</b> & more"
    report = Report("t", [Heading(2, text), Paragraph(text), Bullets([text, text]),
                          Table([text], [[text]], caption=text)])  # fmt: skip
    page = parse_page(render_html(report))
    for block in ("h2", "p", "li", "th", "td", "caption"):
        assert page.inside(block, "strong") and page.inside(block, "code"), block
        links = [attrs["href"] for path, attrs in page.elements if path[-1] == "a" and block in path]
        assert links == ["docs/study.md"] * (2 if block == "li" else 1), block
    assert not page.inside("p", "b")  # raw HTML in the text is shown as text, escaped
    assert sum("<b>not markup</b> & more" in t for _, t in page.texts) == 7
    assert not [t for _, t in page.texts if "**" in t or "`" in t]


def test_the_report_says_each_sentence_once(written):
    """No sentence of the prose (paragraphs and bullet points) is printed twice, in report.md or report.html."""
    out, _, _ = written
    md = (out / "report.md").read_text()
    prose = [line.removeprefix("- ") for line in md.splitlines() if line and line[0] not in "#|!*"]
    # a whole paragraph or bullet point, and any long sentence in one (a short one such as "1 of 1 pairs of
    # conditions are ordered as in the paper." may end several different statements)
    sentences = prose + [s for line in prose for s in re.split(r"(?<=\.) ", line) if len(s) > 80 and s != line]
    repeated = {s for s in sentences if sentences.count(s) > 1}
    assert not repeated, repeated
    assert md.count("no significance claims") == 1
    page = (out / "report.html").read_text()
    assert page.count("no significance claims") == 1
    one_seed = markdown(synthetic_results(seeds=(0,)))
    assert one_seed.count("n = 1 seed per condition: every number is one trained model") == 1
