"""``peanchor data``: get datasets into shape before training.

* ``peanchor data prepare --data NAME [--data-root PATH] --out DIR``: decode a dataset once into
  memory-mapped uint8 arrays (:func:`peanchor.data.prepare_dataset`); train from it afterwards with
  ``--data prepared --data-root DIR``.
* ``peanchor data imagenet100 --imagenet-root DIR --class-list FILE --out DIR``: a view of the 100 listed
  classes of a full ImageNet as symlinks (:func:`peanchor.data.materialize_imagenet100`).

Imports: :mod:`peanchor.commands` (shared: ``--set`` for dataset keys); when run, :mod:`peanchor.data`,
:mod:`peanchor.checkpoint.weights` (listing what was skipped).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from peanchor.commands.shared import with_data_items


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "data",
        help="prepare datasets: decode once into uint8 arrays, or build the ImageNet-100 view",
        description="Dataset preparation. Nothing here downloads: datasets are read from local disk.",
    )
    p.set_defaults(func=lambda args: _usage(p))
    actions = p.add_subparsers(dest="action", metavar="ACTION")
    _add_prepare(actions)
    _add_imagenet100(actions)
    return p


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _add_prepare(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "prepare",
        help="decode a dataset once into memory-mapped uint8 arrays at the model resolution",
        description="Decode the train and val splits of a dataset once, resized to --img-size, into OUT/train.npy, "
        "OUT/val.npy (uint8 memmaps), their labels and OUT/meta.json (written last). Train from it with "
        "`peanchor train --data prepared --data-root OUT`. Rerunning into a folder that already holds the same "
        "preparation does nothing; a folder holding a different one is refused.",
    )
    p.add_argument("--data", metavar="NAME", required=True, help="dataset (imagefolder, imagenet100, cifar10, hf, scenes, ...)")
    p.add_argument("--data-root", metavar="PATH", help="where the dataset lives")
    p.add_argument("--class-list", metavar="FILE", help="class subset, one WordNet id / class name per line")
    p.add_argument("--img-size", type=int, metavar="N", help="resolution to store, in pixels (default: the dataset's default, 32)")
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    p.add_argument("--workers", type=int, default=0, metavar="N", help="DataLoader workers while decoding (default: 0)")
    p.add_argument("--batch-size", type=int, default=256, metavar="N", help="images decoded per batch (default: 256)")
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE",
        help="any other dataset key, e.g. --set val_size=5000 --set hf_name=clane9/imagenet-100 (repeatable)",
    )  # fmt: skip
    p.set_defaults(func=run_prepare)


def _add_imagenet100(actions: argparse._SubParsersAction) -> None:
    p = actions.add_parser(
        "imagenet100",
        help="make an ImageNet-100 folder of symlinks to the listed classes of a full ImageNet",
        description="Create OUT/train/<wnid> and OUT/val/<wnid> as symlinks to the classes of --imagenet-root (laid out as "
        "ROOT/train/<wnid>/*.JPEG and ROOT/val/<wnid>/*.JPEG) listed in --class-list. Nothing is copied or "
        "overwritten; rerunning is a no-op.",
    )
    p.add_argument("--imagenet-root", metavar="DIR", required=True, help="a full ImageNet in ImageFolder layout")
    p.add_argument("--class-list", metavar="FILE", required=True, help="one WordNet id per line (the CMC list)")
    p.add_argument("--out", metavar="DIR", required=True, help="output folder")
    p.set_defaults(func=run_imagenet100)


def data_spec_from_args(args: argparse.Namespace):  # -> peanchor.data.DataSpec
    """The DataSpec for ``prepare``: the flags, then ``--set`` items, type-checked like ``train --set``."""
    from peanchor.data import DataSpec

    spec = DataSpec()
    if args.data is not None:
        spec = spec.for_dataset(args.data)
    flags = {"root": args.data_root, "class_list": args.class_list, "img_size": args.img_size}
    return with_data_items(spec, flags, list(args.set))


def run_prepare(args: argparse.Namespace) -> int:
    from peanchor.data import prepare_dataset
    from peanchor.data.prepared import read_meta
    from peanchor.checkpoint.weights import few
    from peanchor.core.errors import ConfigError

    if args.workers < 0:
        raise ConfigError(f"--workers {args.workers}: expected >= 0")
    if args.batch_size < 1:
        raise ConfigError(f"--batch-size {args.batch_size}: expected >= 1")
    spec = data_spec_from_args(args)
    out = prepare_dataset(spec, Path(args.out), batch_size=args.batch_size, num_workers=args.workers)
    meta = read_meta(out)
    counts = ", ".join(f"{n} {split}" for split, n in meta["counts"].items())
    print(f"prepared {spec.name} at {spec.img_size} px in {out} ({counts} images); train with: "
          f"peanchor train --data prepared --data-root {out} --img-size {spec.img_size}")  # fmt: skip
    skipped = [name for names in (meta.get("skipped") or {}).values() for name in names]
    if skipped:
        print(f"skipped {len(skipped)} unreadable image{'s' if len(skipped) > 1 else ''} (listed in "
              f"{out / 'meta.json'}): {few(skipped, 5)}")  # fmt: skip
    return 0


def run_imagenet100(args: argparse.Namespace) -> int:
    from peanchor.data import materialize_imagenet100

    out = materialize_imagenet100(args.imagenet_root, args.class_list, args.out)
    print(f"ImageNet-100 view in {out}; use it with --data imagenet100 --data-root {out}")
    return 0
