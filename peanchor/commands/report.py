"""``peanchor report PATH...``: write one report from result files.

Reads result files only (run summaries, analyses, statuses), never models. One reproduce directory is assembled
into ``OUT/results.json`` from the files under it, and its report written there. Anything else is read as it is
and gathered into one report (:func:`peanchor.report.inputs.gather`): any mix of analysis directories (or
``analysis.json`` files), run directories analysed by ``peanchor analyze``, ``results.json`` files and the
reproduce directories holding them, each named ``NAME=PATH`` or by what its run recorded (its condition and seed)
or its directory.

Imports: when run, :mod:`peanchor.study` (assembly), :mod:`peanchor.report`, :mod:`peanchor.core.fileio` (the lock).
"""

from __future__ import annotations

import argparse
from pathlib import Path

DEFAULT_REPORT_DIR = Path("runs") / "report"  # the report of several inputs, unless --out says


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "report",
        help="write report.md/.html with figures from a reproduce directory, or from any analyses and results files",
        description="Given one reproduce directory OUT, assemble OUT/results.json from the analyses of the cells "
        "under OUT/runs (e.g. after sharded `peanchor reproduce --shard i/n` runs) and write OUT/report.md, "
        "OUT/report.html and OUT/figures/. Given anything else, read it as it is and write one report of it all: "
        "analysis directories (or analysis.json), run directories analysed by `peanchor analyze`, results.json "
        "files, in any mix; NAME=PATH names a model (a condition in the report: ape, rope, ... get the study's "
        "styles), otherwise its name is the condition its run recorded, or its directory's name.",
    )
    p.add_argument("paths", nargs="+", metavar="[NAME=]PATH", help="a reproduce directory, or analyses and results "
                   "files to report on together")  # fmt: skip
    p.add_argument("--out", "--report-dir", dest="report_dir", metavar="DIR", help="where to write the report "
                   f"(default: the one input's own directory, {DEFAULT_REPORT_DIR} for several; --report-dir is the "
                   "older spelling)")  # fmt: skip
    p.add_argument("--allow-mixed", action="store_true", help="compare analyses made on different images or with "
                   "different permutations behind RPI (refused by default: the comparison would be meaningless)")  # fmt: skip
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from peanchor.core import fileio
    from peanchor.core.errors import DataError
    from peanchor.report.inputs import input_arg
    from peanchor.study import MANIFEST, write_results_and_report

    inputs = [input_arg(text) for text in args.paths]
    for _, path in inputs:
        if not path.exists():
            raise DataError(f"{path} does not exist (expected a reproduce directory, an analysis directory, a run "
                            "directory, analysis.json or results.json)")  # fmt: skip
    (name, target), many = inputs[0], len(inputs) > 1
    is_grid = target.is_dir() and ((target / MANIFEST).exists() or (target / "runs").is_dir())
    if is_grid and not many and name is None and not args.report_dir:
        with fileio.RunLock(target):
            results, _ = write_results_and_report(target, force=True)
        missing = results.missing
        print(f"{target}: {len(results.models)} models, {len(results.alpha_sweep)} α-sweep points, "
              f"{len(results.failed)} failed, {len(missing)} missing")  # fmt: skip
        if missing:
            print(f"not analysed yet: {', '.join(missing)}")
        print(f"results: {target / 'results.json'}\nreport: {target / 'report.md'} and {target / 'report.html'}")
        return 0
    from peanchor.report import write_report
    from peanchor.report.inputs import gather_items
    from peanchor.report.mixing import check_comparable

    results = gather_items([(n, str(p)) for n, p in inputs])
    differ = check_comparable(results, args.allow_mixed)  # refuses a meaningless mix in one line
    if differ:
        print(differ)
    if args.report_dir:
        report_dir = Path(args.report_dir)
    elif many:
        report_dir = DEFAULT_REPORT_DIR
    else:
        report_dir = target if target.is_dir() else target.parent
    write_report(results, report_dir, allow_mixed=args.allow_mixed)
    conditions = ", ".join(results.conditions)
    print(f"{len(results.models)} models ({conditions}), {len(results.alpha_sweep)} α-sweep points")
    print(f"report: {report_dir / 'report.md'} and {report_dir / 'report.html'}")
    return 0

