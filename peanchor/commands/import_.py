"""``peanchor import``: turn checkpoints from elsewhere into peanchor run directories.

Each source is a sub-command: ``peanchor import paper CKPT --condition ape --out RUN``. The result is
a normal run directory (``model.safetensors``, ``config.yaml``, ``summary.json``) that ``analyze``,
``reproduce`` and ``load_model`` read like a trained run.

Imports: :mod:`peanchor.settings.conditions` (the paper's names, for the choices); when run,
:mod:`peanchor.convert.paper_run`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from peanchor.settings.conditions import PAPER_CHECKPOINTS


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "import",
        help="import checkpoints from elsewhere (the paper's released models) as run directories",
        description="Convert a checkpoint from another code base into a peanchor run directory.",
    )
    p.set_defaults(func=lambda args: _usage(p))
    sources = p.add_subparsers(dest="source", metavar="SOURCE")
    _add_paper(sources)
    return p


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


# A mirror of peanchor.convert.paper.SPE_TABLE_MODES (a test keeps them equal), so that building the parser does
# not import torch.
SPE_TABLE_MODES = ("check", "as-ape")


def _add_paper(sources: argparse._SubParsersAction) -> None:
    p = sources.add_parser(
        "paper",
        help="a released checkpoint of the paper (Mannes 2026): {condition}{n}_imagenet_100_60",
        description="Import one of the paper's released checkpoints (a torch.save dict with a 'model' state dict, "
        "or a bare state dict). It is read with torch.load(weights_only=True) only: a file that needs arbitrary "
        "unpickling is refused. Width, depth, patch size, grid and classes come from the tensor shapes; the head "
        "count cannot, and defaults to the paper's 8. Rerunning the same import is a no-op; an --out that holds "
        "anything else is refused.",
    )
    p.add_argument("checkpoint", metavar="CKPT", help="the checkpoint file")
    mapping = ", ".join(f"{k}→{c.pe}{' trained with RPT' if c.rpt else ''}" for k, c in PAPER_CHECKPOINTS.items())
    p.add_argument(
        "--condition", choices=tuple(PAPER_CHECKPOINTS), type=str.lower,
        help=f"the paper's condition (default: from the file name, e.g. ape3_imagenet_100_60 → ape); {mapping}",
    )  # fmt: skip
    p.add_argument("--out", metavar="RUN_DIR", help="run directory to write (default: runs/paper-<file name>)")
    p.add_argument("--num-heads", type=int, metavar="N", help="attention heads (default: 8, the paper's)")
    p.add_argument(
        "--spe-table", choices=SPE_TABLE_MODES, default="check",
        help="check (default): an SPE sincos_pe buffer must equal the paper's sin-cos table to 1e-5; "
        "as-ape: load a differing buffer as the fixed table of an ape PE (same function, pe='ape')",
    )  # fmt: skip
    p.set_defaults(func=run_paper)


def run_paper(args: argparse.Namespace) -> int:
    from peanchor.convert.paper_run import describe, import_paper

    out = Path(args.out) if args.out else Path("runs") / f"paper-{Path(args.checkpoint).stem}"
    summary = import_paper(
        args.checkpoint, out, args.condition, num_heads=args.num_heads, spe_table=args.spe_table
    )
    if summary.get("status") == "already_imported":
        print(f"{out} already holds this import; nothing done")
    else:
        print(f"imported {args.checkpoint} → {out}: {describe(summary)}")
    return 0
