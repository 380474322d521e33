"""The landing page (README.md) and the docs site (mkdocs.yml over docs/): what they hold, that every page is
reachable, that every public name has a reference page, and that the site builds in strict mode, offline."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import sys
import types

import pytest
import yaml

import peanchor

from tests.helpers.paths import ROOT

DOCS = ROOT / "docs"
README = (ROOT / "README.md").read_text()


def mkdocs_config() -> dict:
    class Loader(yaml.SafeLoader):  # mkdocs.yml may hold !!python/name tags; none are read here
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)


def nav_pages(nav: list) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def reference_targets() -> dict[str, str]:
    """reference page → the object its ``:::`` directive renders."""
    targets = {}
    for page in sorted((DOCS / "reference").glob("*.md")):
        found = re.findall(r"^::: ([\w.]+)$", page.read_text(), re.M)
        if page.name != "index.md":
            assert len(found) == 1, f"{page.name}: one object per page"
            targets[page.name] = found[0]
    return targets


def resolve(dotted: str) -> object:
    module, name = dotted.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def test_the_readme_is_a_landing_page():
    lines = README.splitlines()
    assert len(lines) <= 200, len(lines)
    assert "https://arxiv.org/abs/2606.00124" in README  # the paper
    assert "](docs/index.md)" in README  # the docs
    assert re.search(r"^pip install -e \.", README, re.M)  # install from a clone
    assert re.search(r"^pip install -e \. && peanchor reproduce\b", README, re.M)  # installs, then the main job
    # one figure of the results, and the interventions section's one
    assert re.findall(r"^!\[.*\]\((.*)\)", README, re.M) == [
        "docs/img/reproduce-cpu/ssdc_per_layer.png", "docs/img/interventions/rope_freqs_sweep.png"]
    assert "mkdocs build" in README.split("## Development")[1]  # the docs' build command
    # passages that used to be said twice are now said once, in the docs
    assert "running 8 cells" not in README and "data prepare" not in README
    for page in DOCS.glob("*.md"):
        text = page.read_text()
        assert text.count("running 8 cells, 1 at a time") <= 1 and text.count("peanchor data prepare --data") <= 1


def test_ci_runs_the_test_command_the_readme_gives():
    ci = (ROOT / ".ci" / "run").read_text()
    command = ci.strip().splitlines()[-1]
    assert command == "python3 -m pytest -n 2"  # two workers on the two cores
    assert re.search(rf"^{re.escape(command)}\s", README.split("## Development")[1], re.M)
    assert '".[test,docs]"' in ci  # the docs extra, so that the suite builds the site


def test_every_local_link_of_the_readme_resolves():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README)
    local = [link for link in links if not link.startswith(("http://", "https://"))]
    assert local
    for link in local:
        assert (ROOT / link).exists(), link


def test_every_docs_page_is_in_the_nav_and_every_nav_entry_exists():
    config = mkdocs_config()
    pages = nav_pages(config["nav"])
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*") if p.suffix in (".md", ".ipynb")}
    assert set(pages) == on_disk, (sorted(on_disk - set(pages)), sorted(set(pages) - on_disk))
    assert len(pages) == len(set(pages))
    # the developers' pages in a section of their own, after the user guide
    sections = [next(iter(e)) for e in config["nav"] if isinstance(e, dict)]
    assert sections[-1] == "Developers"
    developers = nav_pages([config["nav"][-1]])
    assert {"ARCHITECTURE.md", "testing.md"} <= set(developers)
    assert not {"ARCHITECTURE.md", "testing.md"} & set(nav_pages(config["nav"][:-1]))


def test_the_site_builds_offline():
    config = mkdocs_config()
    plugins = [p if isinstance(p, str) else next(iter(p)) for p in config["plugins"]]
    assert not {"privacy", "social", "offline-fetch"} & set(plugins)
    assert config["theme"]["font"] is False  # no web fonts fetched
    assert "google_analytics" not in config and "analytics" not in config.get("extra", {})
    jupyter = next(p["mkdocs-jupyter"] for p in config["plugins"] if isinstance(p, dict) and "mkdocs-jupyter" in p)
    assert jupyter["execute"] is False  # the notebook's committed outputs are shown


def test_the_tutorial_page_is_the_examples_notebook():
    page = DOCS / "tutorial.ipynb"
    assert page.is_symlink() and page.resolve() == (ROOT / "examples" / "tutorial.ipynb").resolve()


def test_every_public_name_has_a_reference_page():
    targets = reference_targets()
    rendered = {id(resolve(t)) for t in targets.values()}
    data = {"__version__", "PE_NAMES", "MODEL_SIZES", "LENSES"}  # plain values, named on the reference index
    for name in set(peanchor.__all__) - data:
        obj = getattr(peanchor, name)
        if isinstance(obj, types.ModuleType):  # a callable package (peanchor.audit): its page is the function it calls
            obj = getattr(obj, name)
        assert id(obj) in rendered, f"peanchor.{name} has no page in docs/reference/"
    index = (DOCS / "reference" / "index.md").read_text()
    for name in data - {"__version__"}:
        assert f"`peanchor.{name}`" in index
    for page in targets:  # the index links every page
        assert f"]({page})" in index, page
    for page, target in targets.items():
        obj = resolve(target)
        assert callable(obj), (page, target)
        assert (obj.__doc__ or "").strip() or page == "register_pe.md", f"{target} has no docstring"


def test_griffe_reads_every_reference_docstring_without_a_warning(caplog):
    """What the strict build fails on (mkdocs.yml turns griffe's warnings on), checked in seconds: a docstring
    section griffe cannot read, e.g. a parameter line that names two parameters, which renders as "required"."""
    griffe = pytest.importorskip("griffe")
    options = mkdocs_config()["plugins"][-1]["mkdocstrings"]["handlers"]["python"]["options"]
    assert options["docstring_options"]["warnings"] is True and options["show_source"] is True
    package = griffe.load("peanchor", search_paths=[str(ROOT)])
    parsed = 0
    with caplog.at_level("WARNING", logger="griffe"):
        for target in reference_targets().values():
            obj = package[target.removeprefix("peanchor.")]
            obj = obj.final_target if obj.is_alias else obj
            assert obj.is_function or obj.is_class, f"{target} renders a {obj.kind.value}, not the object"
            for member in [obj, *(m for m in obj.members.values() if not m.is_alias and not m.name.startswith("_"))]:
                if member.docstring is not None:
                    griffe.parse_google(member.docstring)
                    parsed += 1
            if obj.is_function and obj.returns is not None and str(obj.returns) != "None":
                assert "Returns:" in obj.docstring.value, f"{target}: no Returns section"
    assert parsed > 50
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_the_griffe_check_catches_a_line_naming_two_parameters(caplog):
    griffe = pytest.importorskip("griffe")
    module = griffe.visit("m", filepath=ROOT / "m.py", code=(
        'def f(device=None, progress=None):\n'
        '    """Run.\n\n    Args:\n        device, progress: where, and whether to show bars.\n    """\n'))
    with caplog.at_level("WARNING", logger="griffe"):
        griffe.parse_google(module["f"].docstring)
    assert any("'device, progress' does not appear" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_mkdocs_builds_the_site_in_strict_mode(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip('mkdocs is not installed: pip install -e ".[docs]"')
    site = tmp_path / "site"
    notebook = (ROOT / "examples" / "tutorial.ipynb").read_bytes()
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr
    assert "griffe" not in done.stderr  # its warnings are on (mkdocs.yml) and none is left
    analyze = (site / "reference" / "analyze" / "index.html").read_text()
    source = r"<details class=\"mkdocstrings-source\">.*?</details>"
    rendered = re.sub(source, "", analyze, flags=re.S)  # the page without its source code
    assert "Parameters" in rendered and "shifts" in rendered and ":class:" not in rendered
    for name in ("device", "progress", "mean", "std"):  # None-default parameters show None, not "required"
        row = re.search(rf"<td>\s*<code>{name}</code>\s*</td>(.*?)</tr>", analyze, re.S)
        assert row and re.search(r"<td>\s*<code>None</code>\s*</td>\s*$", row[1]), (name, row and row[1][-300:])
    assert "peanchor.analyze(model, images" in re.sub(r"<[^>]+>", "", analyze)  # the example, as code
    for page in (site / "reference").glob("*/index.html"):
        html = page.read_text()
        assert "<blockquote>" not in html, f"{page.parent.name}: a doctest outside an Examples section"
        assert not re.search(r"\w::</p>", html), f"{page.parent.name}: a literal reST '::'"
        assert "Source code in" in html, f"{page.parent.name}: no link to its source"
        if 'doc-object doc-function' in html.split("doc-children")[0]:  # a function's page
            assert "Returns:" in html, f"{page.parent.name}: no Returns section"
    tutorial = (site / "tutorial" / "index.html").read_text()
    figures = re.findall(r'<img[^>]+src="data:image/png;base64,', tutorial)
    assert len(figures) >= 2, "the tutorial's figures, committed with the notebook, are not on its page"
    gallery = (site / "gallery" / "index.html").read_text()
    for png in re.findall(r"\]\((img/[^)]+\.png)\)", (DOCS / "gallery.md").read_text()):
        assert (site / png).is_file() and png.split("/")[-1] in gallery
    assert (ROOT / "examples" / "tutorial.ipynb").read_bytes() == notebook  # the build leaves the notebook alone
