"""The walk of ``peanchor analyze``: what the command does from ``commands/analyze.py:run`` to the first model pass
(``forward_intermediates``), traced with ``sys.setprofile``.

Counted, for peanchor's own functions (calls made while a module is imported, class bodies, comprehensions and
lambdas left out): the distinct functions entered (stops), their files, the calls into a file entered before
from another file (re-entries), the YAML reads of ``--set`` items, the splits of the items, and the calls from
``peanchor/analysis/`` into ``training/config.py`` (the plan climbing to the training config)::

    python -m peanchor train --preset smoke --out /tmp/walk-run --no-progress
    python tools/analyze_walk.py /tmp/walk-run [-v]     # -v: every stop, in order

It runs ``analyze RUN --images 12 --no-alpha --shift jpeg:quality=10 --set analysis.rpi_draws=1
--set data.val_size=50`` into a temporary directory.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = str(ROOT / "peanchor") + os.sep


class Walk:
    def __init__(self) -> None:
        self.started = self.done = False
        self.stops: list[str] = []
        self.files: set[str] = set()
        self.counts = {"reentries": 0, "item_reads": 0, "splits": 0, "plan_to_training": 0}

    def __call__(self, frame, event, arg) -> None:
        code = frame.f_code
        if self.done or event != "call" or not code.co_filename.startswith(PACKAGE):
            return
        if code.co_name == "forward_intermediates":
            self.done = True
            return
        if not self.started:
            self.started = code.co_name == "run" and code.co_filename.endswith(os.path.join("commands", "analyze.py"))
            if not self.started:
                return
        if not code.co_flags & 1 or code.co_name.startswith("<") or _under_import(frame):
            return  # a class body, a comprehension, a lambda, or a call made while a module is imported
        self._count(frame)

    def _count(self, frame) -> None:
        code, back = frame.f_code, frame.f_back
        if back is not None and back.f_code.co_filename != code.co_filename and code.co_filename in self.files:
            self.counts["reentries"] += 1
        if code.co_name == "read_yaml" and back is not None and back.f_code.co_name in ("parse", "parse_set_item"):
            self.counts["item_reads"] += 1
        if code.co_name in ("split_plan_items", "split_set_items"):
            self.counts["splits"] += 1
        if code.co_filename.endswith("config.py") and back is not None and "analysis" in back.f_code.co_filename:
            self.counts["plan_to_training"] += 1
        name = f"{code.co_filename[len(PACKAGE):]}:{code.co_name}"
        if name not in self.stops:
            self.stops.append(name)
            self.files.add(code.co_filename)


def _under_import(frame) -> bool:
    f = frame.f_back
    while f is not None:
        if f.f_code.co_name == "<module>" and f.f_code.co_filename != __file__:
            return True
        f = f.f_back
    return False


def main(run: str, verbose: bool) -> None:
    sys.path.insert(0, str(ROOT))
    from peanchor.cli import main as cli

    walk = Walk()
    with tempfile.TemporaryDirectory() as out:
        sys.setprofile(walk)
        try:
            cli(["analyze", run, "--out", out, "--images", "12", "--no-alpha", "--no-progress", "--shift",
                 "jpeg:quality=10", "--set", "analysis.rpi_draws=1", "--set", "data.val_size=50"])  # fmt: skip
        finally:
            sys.setprofile(None)
    c = walk.counts
    print(f"stops {len(walk.stops)}, files {len(walk.files)}, re-entries {c['reentries']}; --set items read "
          f"{c['item_reads']} times (2 items), split {c['splits']} times; analysis -> training/config calls "
          f"{c['plan_to_training']}")  # fmt: skip
    if verbose:
        print("\n".join(walk.stops))


if __name__ == "__main__":
    main(sys.argv[1], "-v" in sys.argv[2:])
