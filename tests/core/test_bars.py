"""Progress bars: shown on a terminal and in a Jupyter kernel (a widget with ipywidgets, text without it and no
"IProgress not found" warning), quiet where output goes to a pipe or a file."""

from __future__ import annotations

import io
import sys
import types
import warnings

import pytest
from tqdm.std import tqdm as text_bar

from peanchor.core.bars import in_jupyter, progress_bar


class ZMQInteractiveShell:  # the name IPython's kernel shell has
    pass


@pytest.fixture
def kernel(monkeypatch):
    """This process seen as a Jupyter kernel: IPython's get_ipython() returns a ZMQ shell."""
    fake = types.ModuleType("IPython")
    fake.get_ipython = ZMQInteractiveShell  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "IPython", fake)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_outside_jupyter_a_bar_shows_on_a_terminal_only() -> None:
    assert not in_jupyter()
    assert progress_bar(range(3), file=io.StringIO()).disable  # a pipe or a file: quiet
    assert not progress_bar(range(3), file=_Terminal()).disable
    assert progress_bar(range(3), show=False, file=_Terminal()).disable
    out = io.StringIO()
    assert list(progress_bar(range(3), show=True, file=out, desc="work")) == [0, 1, 2]
    assert "work" in out.getvalue() and "3/3" in out.getvalue()


def test_in_a_kernel_without_ipywidgets_the_bar_is_text_and_nothing_warns(kernel, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets fails
    assert in_jupyter()
    out = io.StringIO()  # a kernel's stderr is no terminal
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tqdm.auto would warn here: TqdmWarning: IProgress not found
        bar = progress_bar(range(4), file=out, desc="evaluate")
        assert type(bar) is text_bar and not bar.disable
        assert list(bar) == [0, 1, 2, 3]
    assert "evaluate" in out.getvalue() and "4/4" in out.getvalue()
    assert progress_bar(range(2), show=False, file=out).disable


def test_in_a_kernel_with_ipywidgets_the_bar_is_the_widget(kernel) -> None:
    pytest.importorskip("ipywidgets")
    from tqdm.notebook import tqdm as notebook_bar

    assert isinstance(progress_bar(total=3, show=False), notebook_bar)
