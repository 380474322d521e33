"""The audit reads what a PE declares (``declares``), never its name: the example plug-in's ``rowcol`` passes every
check, a plug-in that declares nothing is "n/a" in every check, and every built-in PE declares itself."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from peanchor.audit import CHECKS, audit
from peanchor.audit.subject import declaration_of
from peanchor.pe import PositionalEncoding
from peanchor.pe.registry import PE_REGISTRY

from tests.helpers.paths import import_file

ROWCOL = Path(__file__).parents[2] / "examples" / "plugin-package" / "src" / "peanchor_example" / "rowcol.py"


@pytest.fixture
def rowcol() -> Iterator[None]:
    """The example plug-in's PE, registered for the test and removed afterwards."""
    try:
        import_file(ROWCOL, "peanchor_example_rowcol_for_audit")  # registers "rowcol"
        yield
    finally:
        PE_REGISTRY._items.pop("rowcol", None)
        sys.modules.pop("peanchor_example_rowcol_for_audit", None)


def test_the_example_plugin_pe_passes_every_check(micro: Callable, rowcol: None) -> None:
    model = micro("rowcol")
    with torch.no_grad():  # tables large enough that position reaches the tokens
        model.pe.row.normal_(std=1.0)
        model.pe.col.normal_(std=1.0)
    report = audit(model)
    assert report.passed and all(c.status in ("pass", "n/a") for c in report.checks), report.table()
    assert report["position_reaches"].status == "pass", report.table()


class Undeclared(PositionalEncoding):
    """A plug-in that adds a constant and declares nothing of its own."""

    name = "undeclared_for_audit_test"

    def add(self, x: torch.Tensor, alpha: float) -> torch.Tensor:
        return x + alpha


def test_a_pe_that_declares_nothing_is_na_in_every_check(micro: Callable) -> None:
    PE_REGISTRY.register(Undeclared)
    try:
        report = audit(micro(Undeclared.name))
    finally:
        PE_REGISTRY._items.pop(Undeclared.name, None)
    assert [c.status for c in report.checks] == ["n/a"] * len(CHECKS), report.table()
    assert all(c.message == "the PE declares nothing to check" for c in report.checks)


def test_explicit_none_declares_nothing_and_the_base_declares_none() -> None:
    class Silent(Undeclared):
        declares = None

    assert declaration_of(Silent) is None
    assert declaration_of(Undeclared) is None  # inherits the base's "none" while adding something
    assert declaration_of(PositionalEncoding).kinds == ("none",)


@pytest.mark.parametrize("name", ["ape", "sincos", "rope", "rope_mixed", "relbias", "peg"])
def test_every_built_in_pe_declares_itself_in_its_own_file(name: str) -> None:
    cls = PE_REGISTRY[name]
    assert "declares" in vars(cls), f"{name} inherits its declaration"
    assert declaration_of(cls) is cls.declares and cls.declares.kinds != ("none",)
