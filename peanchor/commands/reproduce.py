"""``peanchor reproduce``: train and analyse a grid of conditions × seeds, then write results.json and the report.

With no arguments: the ``cpu`` preset (32 px scenes, embedded) into ``runs/reproduce-cpu``. Rerunning
continues where an interrupted run stopped and does only what is missing.

Imports: :mod:`peanchor.presets.catalog` and :mod:`peanchor.settings.conditions` (choices and defaults), :mod:`peanchor.commands`
(shared: the ``--shift`` help, the lenses' names); when run, :mod:`peanchor.study`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from peanchor.commands.shared import check_flags, check_set_items, lens_list, lens_options_help, shift_help
from peanchor.settings.conditions import DEFAULT_CONDITIONS
from peanchor.presets.catalog import PRESET_NAMES, PRESETS, preset_help


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "reproduce",
        help="train + analyse every condition and seed, then write results.json and the report (resumable)",
        description="Reproduce the study on a grid of conditions × seeds: each cell is trained into "
        f"OUT/runs/<condition>-s<seed> and analysed (the lenses normal/RPI: {lens_list()}; ΔSSDC, FS under the "
        "preset's shifts and any --shift, the α sweep for "
        "ape/sincos/rope/rope_mixed), then OUT/results.json and OUT/report.md/.html are written. Incremental: "
        "finished cells are reused. A failed cell, or one whose process dies (e.g. killed for memory), is reported "
        "in one line and the others go on (exit code 1 at the end). "
        "SIGTERM/SIGINT checkpoint the cells in training and exit with 143/130; rerunning continues.",
    )
    p.add_argument("--preset", choices=PRESET_NAMES, default="cpu", help=preset_help())
    p.add_argument("--data", metavar="NAME", help="dataset (default: the preset's)")
    p.add_argument("--data-root", metavar="PATH", help="where the dataset lives")
    p.add_argument("--class-list", metavar="FILE", help="class subset, one WordNet id / class name per line")
    seeds = ", ".join(f"{p.name}: {p.seeds}" for p in PRESETS.values())
    p.add_argument("--seeds", type=int, metavar="N", help=f"seeds 0..N-1 per condition (default: the preset's; {seeds})")
    default_conditions = ",".join(DEFAULT_CONDITIONS)
    own = "; ".join(f"{p.name}: {','.join(p.conditions)}" for p in PRESETS.values() if p.conditions)
    p.add_argument("--conditions", metavar="LIST",
                   help="comma-separated: any PE name (none, ape, sincos, rope, rope_mixed, ...), 'rpt' (APE trained "
                   f"with RPT) or '<pe>-rpt' (default: the paper's, {default_conditions}"
                   + (f"; {own}" if own else "") + ")")
    p.add_argument("--out", metavar="DIR", help="output directory (default: runs/reproduce-<preset>)")
    p.add_argument("--list", action="store_true", help="print the peanchor train command of every cell and the "
                   "final steps, then exit")
    p.add_argument("--shard", metavar="I/N|auto", help="run only shard I of N (1-based: 1/N ... N/N; round-robin "
                   "over cells), or auto: this Slurm array task's shard (from SLURM_ARRAY_TASK_ID, _MIN and _COUNT, "
                   "so a 0- or 1-based array runs every cell once); the report is written by `peanchor report OUT` "
                   "once every shard is done")
    p.add_argument("--shift", action="append", default=[], metavar="KIND:K=V[,K=V]",
                   help=shift_help() + "; changing the shifts analyses every cell again (trained runs are reused)")
    p.add_argument("--severities", action=argparse.BooleanOptionalAction, default=None,
                   help="measure (or not) the severity 1-5 sweep of every measured kind (the ImageNet-C-style table for "
                   "the preset's resolution; default: the preset's analysis defaults, on for cpu; "
                   "--set analysis.severities=... wins)")  # fmt: skip
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a training config key for every cell (e.g. optim.lr=3e-4), or for one condition "
                   "with a prefix (e.g. ape:optim.pe_lr_mult=10), or an analysis setting for every cell (e.g. "
                   "analysis.rpi_draws=2, analysis.alphas=[1,0.5,0]: analyses again, trained runs are reused), or a "
                   f"lens's option ({lens_options_help()}); repeatable")
    p.add_argument("--device", metavar="DEV", help="auto (default), cpu, cuda, cuda:N: for training and analysis")
    p.add_argument("--jobs", default="auto", metavar="N",
                   help="cells trained and analysed at once, each in its own supervised process: on CPU "
                   "single-threaded, on GPUs one GPU each, round-robin over CUDA_VISIBLE_DEVICES (default auto: one per CPU this job may "
                   "use, one per visible GPU, 1 for --device cuda:N or a preset whose cells take seconds, e.g. smoke; "
                   "fewer when the host's available memory does not hold that many cells' estimated peaks). The first "
                   "line says how many run at once and why; a cell whose process dies is reported and the rest go "
                   "on")  # fmt: skip
    p.add_argument("--tensorboard", action="store_true", help="also log each cell's training and analysis to "
                   "TensorBoard (OUT/runs/<cell>/tensorboard, .../analysis/tensorboard) and the report's figures to "
                   "OUT/tensorboard (pip install 'peanchor[tensorboard]')")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)
    return p


def options_from_args(args: argparse.Namespace):  # -> ReproduceOptions
    from peanchor.settings.conditions import parse_conditions
    from peanchor.study import ReproduceOptions, parse_shard
    from peanchor.study.executor import resolve_jobs

    return ReproduceOptions(
        preset=args.preset,
        out=Path(args.out) if args.out else None,
        conditions=parse_conditions(args.conditions) if args.conditions else None,
        seeds=args.seeds,
        data=args.data,
        data_root=args.data_root,
        class_list=args.class_list,
        set_items=list(args.set),
        shifts=list(args.shift),
        severities=args.severities,
        shard=parse_shard(args.shard) if args.shard else (1, 1),
        device=args.device,
        progress=not args.no_progress,
        tensorboard=args.tensorboard,
        debug=bool(getattr(args, "debug", False)),
        jobs=resolve_jobs(args.jobs, args.preset, args.device),
        jobs_auto=args.jobs == "auto",
    )


def _echo_args(args: argparse.Namespace) -> list[str]:
    """The reproduce arguments that define the grid (for the final line of --list)."""
    out: list[str] = ["--preset", args.preset]
    for flag, value in (("--data", args.data), ("--data-root", args.data_root), ("--class-list", args.class_list),
                        ("--seeds", args.seeds), ("--conditions", args.conditions), ("--out", args.out),
                        ("--device", args.device)):  # fmt: skip
        if value is not None:
            out += [flag, str(value)]
    for spec in args.shift:
        out += ["--shift", spec]
    if args.severities is not None:
        out.append("--severities" if args.severities else "--no-severities")
    for item in args.set:
        out += ["--set", item]
    return out


def run(args: argparse.Namespace) -> int:
    check_flags(args)  # a misspelt name fails here, before torch loads
    # and a misspelt --set key (a <condition>: prefix names one of the grid's: --conditions, else the preset's)
    conditions = args.conditions or ",".join(PRESETS[args.preset].conditions or DEFAULT_CONDITIONS)
    check_set_items(args.set, "config", conditions)
    from peanchor.study import list_commands, reproduce

    options = options_from_args(args)
    if args.list:
        if args.shard:
            from peanchor.study import shard_cells

            index, count = options.shard
            wanted = {c.index for c in shard_cells(options.cells(), index, count)}
            lines = list_commands(options, _echo_args(args))
            cells = options.cells()
            lines = [line for i, line in enumerate(lines) if i >= len(cells) or i in wanted]
        else:
            lines = list_commands(options, _echo_args(args))
        print("\n".join(lines))
        return 0
    outcome = reproduce(options)
    out = options.out_dir
    if outcome.results is not None:
        r = outcome.results
        note = "" if outcome.wrote_report else " (unchanged: nothing to do)"
        print(f"{out}: {len(r.models)} models, {len(r.alpha_sweep)} α-sweep points, "
              f"{len(r.failed)} failed, {len(r.missing)} missing{note}")  # fmt: skip
        print(f"results: {out / 'results.json'}\nreport: {out / 'report.md'} and {out / 'report.html'}")
    else:
        index, count = options.shard
        print(f"{out}: shard {index}/{count} done ({len(outcome.cells)} cells, {len(outcome.failed)} failed); "
              f"when every shard is done: peanchor report {out}")  # fmt: skip
    if outcome.failed:
        names = ", ".join(f["name"] for f in outcome.failed)
        print(f"peanchor: error: {len(outcome.failed)} cell(s) failed: {names}", file=sys.stderr)
        return 1
    return 0
