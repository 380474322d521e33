"""The tutorial notebook (examples/tutorial.ipynb) runs top to bottom in a fresh kernel that imports this checkout's
peanchor, and is committed with its outputs stripped."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "tutorial.ipynb"


def test_the_committed_notebook_has_no_outputs() -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code, "the tutorial has no code cells"
    assert all(c.outputs == [] and c.execution_count is None for c in code), "strip the outputs before committing"


@pytest.mark.slow
def test_the_tutorial_runs_without_errors(tmp_path, monkeypatch) -> None:
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel is a fresh process: it finds this checkout's peanchor first, writes under tmp_path, uses one thread
    # per op (tiny models) and keeps the scenes cache wherever the suite keeps it.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p))
    monkeypatch.setenv("PEANCHOR_TUTORIAL_OUT", str(tmp_path / "runs"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # raises CellExecutionError, with the cell and its traceback, if any cell errors
    first = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert f"peanchor from {ROOT / 'peanchor'}" in first
    images = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2, "the two figures (SSDC per layer, the α sweep) were not drawn"
    assert (tmp_path / "runs" / "ape" / "analysis" / "analysis.json").is_file()
