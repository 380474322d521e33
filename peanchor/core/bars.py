"""Progress bars that suit where they are shown: a widget in a Jupyter kernel (tqdm's notebook bar, with
ipywidgets: ``pip install 'peanchor[notebook]'``), text in a kernel without ipywidgets (and no "IProgress not
found" warning), text on a terminal, nothing where output is neither (a pipe, a log file, CI).

``show`` is what the callers' ``progress`` argument means: True always, False never, None (the default) in a
terminal or a Jupyter kernel only.

Imports: tqdm.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

__all__ = ["in_jupyter", "progress_bar"]


def in_jupyter() -> bool:
    """Whether this process is a Jupyter kernel (IPython's ZMQ shell), where stderr is no terminal but a bar shows."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None
    return type(shell).__name__ == "ZMQInteractiveShell"


def _bar_class() -> type:
    if in_jupyter():
        try:
            import ipywidgets  # noqa: F401 (tqdm's notebook bar is an ipywidgets widget)
        except ModuleNotFoundError:
            pass  # the text bar below: tqdm.auto would warn "IProgress not found" and show nothing useful
        else:
            from tqdm.notebook import tqdm as notebook_bar

            return notebook_bar
    from tqdm.std import tqdm as text_bar

    return text_bar


def progress_bar(iterable: Iterable[Any] | None = None, *, show: bool | None = None, **kwargs: Any) -> Any:
    """A tqdm bar over ``iterable`` (or one to ``update`` by hand) with tqdm's ``kwargs``, shown as ``show`` says."""
    if show is None:
        disable = False if in_jupyter() else None  # None: tqdm shows it on a terminal only
    else:
        disable = not show
    return _bar_class()(iterable, disable=disable, **kwargs)
