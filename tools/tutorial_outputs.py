"""Regenerate the tutorial's committed outputs and measure how far its numbers move from seed to seed.

::

    python tools/tutorial_outputs.py              # seed 0 -> the committed outputs; seeds 0..4 -> the spread
    python tools/tutorial_outputs.py --seeds 8    # more seeds for the spread

The tutorial (examples/tutorial.ipynb) trains tiny models for seconds. On another CPU their float rounding differs, the
training takes another path, and the printed numbers move about as far as they do under another seed. So the test
that reruns the notebook (tests/project/test_notebook.py) compares each printed number with the committed one within
a tolerance set by that spread, not by rounding. This tool

1. runs the notebook top to bottom in a fresh kernel with ``PEANCHOR_TUTORIAL_SEED=s`` for ``s = 0 .. K-1`` (the
   notebook seeds its training, its random models and its analysis with it);
2. writes the seed-0 run's outputs into the notebook (its execution counts, figures and printed numbers);
3. stores in the notebook's metadata (``peanchor.spread``) the standard deviation over the K seeds of every number
   the result cells print, in print order, with ``null`` for a number that is undefined (NaN) in some seeds and not in
   others, and ``peanchor.spread_seeds`` = K.

It imports this checkout's peanchor (PYTHONPATH), uses one thread per op and writes its runs into a temporary folder.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "tutorial.ipynb"
NUMBER = re.compile(r"[+-]?(?:\d+\.\d+|nan)")


def stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")


def result_cells(nb) -> list:
    """The cells whose printed numbers are the analysis's (the training cell's lines carry timings)."""
    return [c for c in nb.cells if c.cell_type == "code" and ("peanchor.analyze(" in c.source or
                                                              ".alpha_sweep" in c.source)]  # fmt: skip


def printed_numbers(nb) -> list[str]:
    return [n for c in result_cells(nb) for n in NUMBER.findall(stdout(c))]


def execute(seed: int, workdir: Path):
    """The notebook run top to bottom in a fresh kernel with this seed."""
    import nbclient
    import nbformat

    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = {"PEANCHOR_TUTORIAL_SEED": str(seed), "PEANCHOR_TUTORIAL_OUT": str(workdir / f"seed{seed}"),
           "OMP_NUM_THREADS": "1", "MPLBACKEND": "Agg",
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}  # fmt: skip
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)  # the kernel inherits the environment
    try:
        client = nbclient.NotebookClient(nb, timeout=900, kernel_name="python3",
                                         resources={"metadata": {"path": str(workdir)}})  # fmt: skip
        client.execute()
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    return nb


def spread(runs: list[list[str]]) -> list[float | None]:
    """Per printed number: the sample std over the runs, or None where it is NaN in some runs and not in others."""
    out: list[float | None] = []
    for values in zip(*runs):
        nan = ["nan" in v for v in values]
        if all(nan):
            out.append(0.0)
        elif any(nan):
            out.append(None)
        else:
            out.append(round(statistics.stdev(float(v) for v in values), 4))
    return out


def main(argv: list[str] | None = None) -> int:
    import nbformat

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=5, help="seeds for the spread (default 5; at least 2)")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be at least 2")
    with tempfile.TemporaryDirectory() as tmp:
        runs = []
        for seed in range(args.seeds):
            nb = execute(seed, Path(tmp))
            runs.append(printed_numbers(nb))
            print(f"seed {seed}: {len(runs[-1])} numbers", file=sys.stderr)
            if seed == 0:
                committed = nb
        counts = {len(r) for r in runs}
        if len(counts) != 1:
            print(f"the seeds print different counts of numbers ({sorted(counts)}): print a fixed count (nan for an "
                  "undefined number) so that they can be compared", file=sys.stderr)  # fmt: skip
            return 1
    meta = committed.metadata.setdefault("peanchor", {})
    meta.pop("cpu_capability", None)
    meta["spread"] = spread(runs)
    meta["spread_seeds"] = args.seeds
    meta["note"] = ("spread: the std over seeds 0..spread_seeds-1 of each number the result cells print "
                    "(tools/tutorial_outputs.py); tests/project/test_notebook.py compares a fresh run within it")
    nbformat.write(committed, NOTEBOOK)
    finite = [s for s in meta["spread"] if s is not None and math.isfinite(s)]
    print(f"wrote {NOTEBOOK.relative_to(ROOT)}: {len(meta['spread'])} numbers, largest spread {max(finite):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
