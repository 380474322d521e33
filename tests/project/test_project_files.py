"""The project files a user or an indexer reads: LICENSE, CITATION.cff, CHANGELOG.md and the one version."""

from __future__ import annotations

import re

import pytest
import yaml

import peanchor

from tests.helpers.paths import ROOT



def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib", reason="tomllib is in the standard library from Python 3.11")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_the_version_is_written_once_and_pyproject_reads_it():
    project = pyproject()
    assert "version" not in project["project"], "pyproject.toml must not spell the version a second time"
    assert "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "peanchor.__version__"}
    assert re.fullmatch(r"\d+\.\d+\.\d+", peanchor.__version__)


def test_license_is_the_mit_text_pyproject_names():
    text = (ROOT / "LICENSE").read_text()
    assert pyproject()["project"]["license"] == {"text": "MIT"}
    assert text.startswith("MIT License\n")
    assert re.search(r"^Copyright \(c\) \d{4} the peanchor authors$", text, re.M)
    assert "THE SOFTWARE IS PROVIDED \"AS IS\"" in text


def test_citation_cites_peanchor_at_its_version_and_the_study_as_a_reference():
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["type"] == "software"
    for key in ("message", "title", "authors"):  # CFF 1.2.0's required keys besides cff-version
        assert cff[key]
    assert str(cff["version"]) == peanchor.__version__
    assert cff["license"] == pyproject()["project"]["license"]["text"]
    (study,) = cff["references"]
    # the title docs/study.md quotes for the paper, to the letter
    quoted = re.search(r'\*\*"(.+?)"\*\*', (ROOT / "docs" / "study.md").read_text(), re.S)
    assert quoted is not None
    assert study["title"] == " ".join(quoted.group(1).split())
    assert study["url"] == "https://arxiv.org/abs/2606.00124"
    assert {"type": "doi", "value": "10.48550/arXiv.2606.00124"}.items() <= study["identifiers"][0].items()
    assert study["authors"][0]["family-names"] == "Mannes"


def test_changelog_follows_keep_a_changelog_and_has_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    releases = re.findall(r"^## \[(.+?)\](.*)$", text, re.M)
    assert releases[0] == ("Unreleased", "")
    versions = [name for name, _ in releases[1:]]
    assert versions and versions[0] == peanchor.__version__
    for name, rest in releases[1:]:
        assert re.fullmatch(r"\d+\.\d+\.\d+", name) and re.fullmatch(r" - \d{4}-\d{2}-\d{2}", rest), (name, rest)
    kinds = set(re.findall(r"^### (.+)$", text, re.M))
    assert kinds and kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
