"""``peanchor report OUT``: assemble ``OUT/results.json`` from the result files under OUT and write the report.

Reads result files only (run summaries, analyses, statuses), never models. ``OUT`` may also be a
``results.json`` file (or a directory holding only one): then it is rendered as it is.

Imports: when run, :mod:`peanchor.study` (assembly), :mod:`peanchor.report`, :mod:`peanchor.results`,
:mod:`peanchor.fileio` (the lock).
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help="assemble results.json from a reproduce directory and write report.md/.html with figures",
        description="Assemble OUT/results.json from the analyses of the cells under OUT/runs (e.g. after sharded "
        "`peanchor reproduce --shard i/n` runs) and write OUT/report.md, OUT/report.html and OUT/figures/. Given a "
        "results.json (or a directory with one and no runs/), render that file as it is.",
    )
    p.add_argument("out", metavar="OUT", help="a reproduce output directory, or a results.json file")
    p.add_argument("--report-dir", metavar="DIR", help="where to write the report when OUT is a results.json file "
                   "(default: its directory)")  # fmt: skip
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from peanchor import fileio
    from peanchor.errors import DataError
    from peanchor.study import MANIFEST, write_results_and_report

    target = Path(args.out)
    is_grid = target.is_dir() and ((target / MANIFEST).exists() or (target / "runs").is_dir())
    if not is_grid:
        from peanchor.report import write_report
        from peanchor.results import read_results

        if not target.exists():
            raise DataError(f"{target} does not exist (expected a reproduce directory or a results.json)")
        results = read_results(target)
        report_dir = Path(args.report_dir) if args.report_dir else (target if target.is_dir() else target.parent)
        write_report(results, report_dir)
        print(f"report: {report_dir / 'report.md'} and {report_dir / 'report.html'}")
        return 0
    with fileio.RunLock(target):
        results, _ = write_results_and_report(target, force=True)
    missing = results.missing
    print(f"{target}: {len(results.models)} models, {len(results.alpha_sweep)} α-sweep points, "
          f"{len(results.failed)} failed, {len(missing)} missing")  # fmt: skip
    if missing:
        print(f"not analysed yet: {', '.join(missing)}")
    print(f"results: {target / 'results.json'}\nreport: {target / 'report.md'} and {target / 'report.html'}")
    return 0
