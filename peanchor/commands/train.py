"""``peanchor train``: train one ViT condition into a resumable run directory.

Imports: :mod:`peanchor.presets.catalog` (choices), :mod:`peanchor.pe` (the PE registry's names in the help, without
torch), :mod:`peanchor.commands` (shared: the names, the flags and ``--set`` keys checked before torch loads),
:mod:`peanchor.settings.set_items` (the ``--set`` items, read once), :mod:`peanchor.api.training` (the flags' config keys, the default run directory); when run,
:mod:`peanchor.training` and, with ``--tensorboard``, :mod:`peanchor.core.tracking`.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from peanchor.commands.shared import check_flags, check_set_items
from peanchor.presets.catalog import PRESET_NAMES, preset_help
from peanchor.settings.set_items import parse_set_items
from peanchor.api.training import FLAG_KEYS, default_out, overrides_of


def pe_choices() -> list[str]:
    """The PE names for ``--pe``'s help, without importing torch: the registry's (built-ins and loaded plug-ins) and
    the names installed plug-ins declare (``peanchor.pes`` entry points)."""
    from peanchor.pe import PE_REGISTRY

    return list(PE_REGISTRY.declared_names())


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help="train a ViT with a positional encoding (resumable)",
        description="Train one condition (PE × RPT × seed) into a run directory: config.yaml, metrics.csv, "
        "model.safetensors, summary.json, train.log and resume state. Rerunning the same command resumes it; a "
        "finished run is left alone; a different config into the same --out is refused. SIGTERM/SIGINT write a "
        "resumable checkpoint and exit with 143/130.",
    )
    p.add_argument("--preset", choices=PRESET_NAMES, default="cpu", help=preset_help())
    p.add_argument(
        "--data", metavar="NAME", help="dataset (scenes, cifar10, cifar100, imagenet100, imagefolder, hf, prepared)"
    )
    p.add_argument("--data-root", metavar="PATH", help="where the dataset lives")
    p.add_argument("--class-list", metavar="FILE", help="class subset, one WordNet id / class name per line")
    p.add_argument("--model", metavar="NAME", help="model size (vit_micro, vit_tiny, vit_small, vit_paper)")
    p.add_argument("--pe", metavar="NAME", help=f"positional encoding ({', '.join(pe_choices())})")
    p.add_argument(
        "--rpt", action="store_true", default=None, help="random patch-token permutation on every training step"
    )
    p.add_argument("--img-size", type=int, metavar="N", help="input resolution in pixels")
    p.add_argument("--patch-size", type=int, metavar="N", help="patch size in pixels")
    p.add_argument("--epochs", type=int, metavar="N")
    p.add_argument(
        "--seed", type=int, metavar="N", help="training seed (init, order, dropout, RPT); the data stays fixed"
    )
    p.add_argument("--out", metavar="DIR", help="run directory (default: runs/train-<preset>-<pe>[-rpt]-s<seed>)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="override any config key, e.g. --set optim.lr=3e-4 --set model.overrides.depth=6 (repeatable)",
    )  # fmt: skip
    p.add_argument("--device", metavar="DEV", help="auto (default), cpu, cuda, cuda:N (under torchrun: auto or cuda; "
                   "each process takes its LOCAL_RANK's GPU)")
    p.add_argument("--compile", action="store_true", default=None,
                   help="torch.compile the training step (forward, loss and, through AOTAutograd, backward)")
    p.add_argument("--tensorboard", action="store_true", help="also log loss, accuracy, learning rate and throughput "
                   "to TensorBoard event files in RUN/tensorboard (pip install 'peanchor[tensorboard]')")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    check_flags(args)  # a misspelt name fails here, before torch loads
    items = parse_set_items(args.set)  # each --set item read once, here
    check_set_items(items, "config")  # a misspelt --set key fails before torch loads
    from peanchor.presets.catalog import resolve_config

    flags = {key: getattr(args, key) for key in FLAG_KEYS}
    config = resolve_config(args.preset, overrides_of(flags), items)
    out = (
        Path(args.out) if args.out else default_out(config.preset, config.model.pe, config.train.rpt, config.train.seed)
    )

    from peanchor.training.loop import train

    tracker = None
    if args.tensorboard:
        from peanchor.core.tracking import TrainingLog, require_tensorboard

        require_tensorboard()
        tracker = TrainingLog(out)
    try:
        summary = train(config, out, progress=not args.no_progress, tracker=tracker)
    finally:
        if tracker is not None:
            tracker.close()
    if os.environ.get("RANK", "0") != "0":
        return 0  # under torchrun, rank 0 reports
    acc = summary.get("val_acc")
    acc_text = f"{acc:.4f}" if isinstance(acc, float) else "n/a"
    note = " (already finished; nothing done)" if summary.get("status") == "already_finished" else ""
    print(f"run: {out}{note}")
    print(f"final val acc: {acc_text} ({summary.get('condition')}, {summary.get('epochs')} epochs, "
          f"{summary.get('seconds', 0):.0f} s)")  # fmt: skip
    return 0
