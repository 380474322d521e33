"""The report reads as a finished document: the sample-size sentence says whether intervals exist, no claim key
leaks into the text, the claims' rules are linked, and a paired table of dashes at one seed is a sentence instead."""

from __future__ import annotations

import copy

from peanchor.report.claims import check_claims
from peanchor.report.document import Paragraph, Table
from peanchor.report.markdown import render_markdown
from peanchor.report.prose import build_report
from peanchor.results.records import results_from_dict
from tests.helpers.claim_results import PAPER_LIKE
from tests.helpers.claim_results import claim_results as _results


def _md(doc: dict, study_doc: str | None = "../docs/study.md") -> str:
    return render_markdown(build_report(results_from_dict(doc), study_doc=study_doc), ".")


def test_one_seed_says_whether_its_analyses_recorded_intervals():
    assert "Intervals in brackets are the analysis's own" in _md(_results(PAPER_LIKE, seeds=(0,)))
    older = _md(_results(PAPER_LIKE, seeds=(0,), half=None))
    assert "these analyses recorded no intervals (an older peanchor made them)" in older
    assert "Intervals in brackets are the analysis's own" not in older


def test_no_claim_key_leaks_and_the_rules_are_linked():
    doc = _results({"none": PAPER_LIKE["none"], "ape": PAPER_LIKE["ape"]}, seeds=(0,))
    doc["alpha_sweep"] = []  # nothing to say about α: the claim is not measured
    md = _md(doc)
    for claim in check_claims(results_from_dict(doc)):
        assert claim.key not in md, claim.key
    assert "Not measured by these results: RoPE builds up with depth; Scaling the APE down." in md
    assert "[docs/study.md](../docs/study.md#which-of-the-papers-claims-a-run-replicates)" in md
    assert "docs/study.md in peanchor's source" in _md(doc, study_doc=None)  # an installed peanchor: named


def test_one_seed_gets_a_sentence_instead_of_a_paired_table_of_dashes():
    report = build_report(results_from_dict(_results(PAPER_LIKE, seeds=(0,))))
    at = next(i for i, b in enumerate(report.blocks) if getattr(b, "text", "").startswith("Fragility against"))
    assert isinstance(report.blocks[at + 1], Paragraph) and "One seed per condition" in report.blocks[at + 1].text
    three = build_report(results_from_dict(_results(PAPER_LIKE)))
    at = next(i for i, b in enumerate(three.blocks) if getattr(b, "text", "").startswith("Fragility against"))
    assert isinstance(three.blocks[at + 1], Table) and all(c != "—" for c in three.blocks[at + 1].rows[0][4:])


def test_an_undefined_fs_reads_undefined_in_the_tables():
    spec = copy.deepcopy(PAPER_LIKE)
    spec["rope"]["undefined"] = "clean accuracy 0.10 not above chance 0.10"
    md = _md(_results(spec, seeds=(0,)))
    row = next(line for line in md.splitlines() if line.startswith("| rope | 1 |"))
    assert "undefined (clean accuracy 0.10 not above chance 0.10)" in row and "nan" not in row.lower()
