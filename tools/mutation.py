"""Mutation testing of the metrics, the claim checks and the shift kernels: run mutmut and print the score per file.

::

    python tools/mutation.py                 # mutmut run (incremental: only what changed), then the score per file
    python tools/mutation.py --report        # the score of the last run only, nothing rerun
    python tools/mutation.py --survivors     # ... and the name of every surviving mutant (`mutmut show NAME`)
    python tools/mutation.py --recheck       # rerun the survivors by name (after adding tests), then the score

What is mutated and which tests run is pyproject's ``[tool.mutmut]`` (``paths_to_mutate``, ``tests_dir``). mutmut
copies the tree into ``mutants/`` (gitignored) and keeps its verdicts there, so a second run only tests mutants of
functions that changed; delete ``mutants/`` for a run from scratch (about 3,400 mutants: roughly an hour on two
shared cores). Not part of CI: too slow. The score counts a mutant as killed when a test failed or timed out
(mutmut's own rule); surviving mutants that no test can kill are listed with a reason in docs/testing.md, and the
score without them is printed beside the raw one. Run it from the repository root.

Imports: mutmut (its status table), the standard library.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EQUIVALENT_DOC = ROOT / "docs" / "testing.md"


def statuses() -> dict[str, dict[str, str]]:
    """``file -> {mutant name: status}`` from the verdicts mutmut keeps in ``mutants/**/*.py.meta``."""
    from mutmut.stats import status_by_exit_code

    out: dict[str, dict[str, str]] = {}
    for meta in sorted((ROOT / "mutants").rglob("*.py.meta")):
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if codes:
            name = str(meta.relative_to(ROOT / "mutants"))[: -len(".meta")]
            out[name] = {k: ("not run" if v is None else status_by_exit_code[v]) for k, v in codes.items()}
    return out


def equivalent_mutants() -> set[str]:
    """The mutant names docs/testing.md lists as not killable here (each in backticks at the start of a table row)."""
    if not EQUIVALENT_DOC.is_file():
        return set()
    return set(re.findall(r"^\|\s*`([\w.]+__mutmut_\d+)`", EQUIVALENT_DOC.read_text(), flags=re.M))


def report(show_survivors: bool) -> float:
    """Print the table; return the score without the documented equivalent mutants (percent)."""
    table = statuses()
    if not table:
        sys.exit("no mutmut results under mutants/: run `python tools/mutation.py` first")
    equivalent = equivalent_mutants()
    rows, total = [], Counter()
    for name, by_mutant in table.items():
        counts = Counter(by_mutant.values())
        counts["mutants"] = len(by_mutant)
        counts["killed"] += counts.pop("timeout", 0)
        counts["equivalent"] = sum(1 for k, s in by_mutant.items() if s == "survived" and k in equivalent)
        total.update(counts)
        rows.append((name, counts))
    rows.append(("total", total))
    print(f"{'file':44} {'mutants':>8} {'killed':>7} {'survived':>9} {'equiv.':>7} {'no tests':>9} {'score':>7}")
    for name, c in rows:
        print(f"{name:44} {c['mutants']:8d} {c['killed']:7d} {c['survived']:9d} {c['equivalent']:7d} "
              f"{c['no tests']:9d} {100 * c['killed'] / max(c['mutants'], 1):6.1f}%")  # fmt: skip
    others = {k: v for k, v in total.items() if k not in ("mutants", "killed", "survived", "equivalent", "no tests")}
    if others:
        print("other verdicts:", ", ".join(f"{k} {v}" for k, v in sorted(others.items())))
    without = 100 * total["killed"] / max(total["mutants"] - total["equivalent"], 1)
    print(f"score: {100 * total['killed'] / max(total['mutants'], 1):.1f}% of all mutants, {without:.1f}% without the "
          f"{total['equivalent']} listed survivors (equivalent, device, precision) in "
          f"{EQUIVALENT_DOC.relative_to(ROOT)}")  # fmt: skip
    if show_survivors:
        for by_mutant in table.values():
            for k, s in by_mutant.items():
                if s != "killed" and s != "timeout":
                    print(f"{s}: {k}" + (" (equivalent)" if k in equivalent else ""))
    return without


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", action="store_true", help="print the last run's score only")
    p.add_argument("--survivors", action="store_true", help="also list every mutant that was not killed")
    p.add_argument("--recheck", action="store_true", help="rerun the surviving mutants by name (after new tests)")
    p.add_argument("--max-children", type=int, default=None, help="mutmut's parallel workers (default: every core)")
    p.add_argument("--min-score", type=float, default=None, help="exit 1 below this score (percent, without the "
                   "equivalent mutants)")  # fmt: skip
    args = p.parse_args(argv)
    if not args.report:
        cmd = ["mutmut", "run"]
        if args.max_children:
            cmd += ["--max-children", str(args.max_children)]
        if args.recheck:
            names = [k for by in statuses().values() for k, s in by.items() if s == "survived"]
            if not names:
                print("no surviving mutants to recheck")
            cmd += names
        if not args.recheck or len(cmd) > 2:
            subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)  # its progress line is long
    score = report(args.survivors)
    return 1 if args.min_score is not None and score < args.min_score else 0


if __name__ == "__main__":
    sys.exit(main())
