"""``peanchor audit MODEL``: the PE audit (docs/audit.md). Ten checks that the model's positional encoding does
what its config says (on timm and transformers models, against a reference forward built from what it declares), on built probe inputs (no dataset), printed as a table, one line per check; ``--json FILE``
writes the same. The exit status is 1 when a check fails.

MODEL is a run directory (``peanchor train``, or the paper's checkpoint through ``peanchor import``), a timm model
(``--timm NAME [--weights FILE]``) or a transformers ``save_pretrained`` folder (``--hf DIR``).

``--timm PATTERN`` or several ``--hf``: the zoo (:mod:`peanchor.audit.zoo`), many architectures with random
weights in one process, resumable, one table (``--out FILE``: FILE.csv and FILE.md). ``--dtype`` sets the dtype
``reference_parity`` runs the model in.

Imports: at parse time nothing else from peanchor; when run, :mod:`peanchor.audit`, :mod:`peanchor.checkpoint.files`,
:mod:`peanchor.adapters`, :mod:`peanchor.commands` (analyze: the ``--timm-arg`` reader).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from peanchor.core.errors import ConfigError


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "audit",
        help="check in seconds that a model's positional encoding does what its config says (no dataset)",
        description="Run the PE audit on one model: what the PE is (beside its config), whether position reaches "
        "the tokens, whether rotary logits are relative, whether the axes are in order on a non-square grid, "
        "whether resampling is faithful, whether prefix tokens are kept, whether fused and eager attention agree, "
        "whether the model without its PE knows no position, whether α behaves, and whether the model's own forward "
        "equals a reference forward built from what it declares (timm, transformers). One line per check: pass, "
        "warn, fail or n/a (with the reason) and what was measured. Exit status 1 when a check fails.",
    )
    p.add_argument("run_dir", nargs="?", metavar="MODEL", help="a run directory (from peanchor train or import)")
    p.add_argument("--timm", metavar="NAME|DIR|PATTERN", help="a timm ViT or Eva model (random unless --weights), a "
                   "timm model folder (config.json + model.safetensors), or a pattern ('vit_*', or several: "
                   "'vit_*,eva*'): the zoo, every matching model with random weights and 2 blocks, one per PE "
                   "configuration (pip install 'peanchor[timm]')")  # fmt: skip
    p.add_argument("--weights", metavar="FILE", help="the timm model's weights: .safetensors, or .pt/.pth read with "
                   "weights_only")  # fmt: skip
    p.add_argument("--timm-arg", action="append", default=[], metavar="KEY=VALUE",
                   help="extra timm.create_model argument, e.g. img_size=384 (repeatable; values parsed as YAML)")
    p.add_argument("--hf", metavar="DIR", nargs="+", help="a local transformers save_pretrained folder (read "
                   "offline); several folders, config-only folders or family names (vit, deit, dinov2, "
                   "dinov2_with_registers, clip, siglip, dinov3): the zoo, with random weights")  # fmt: skip
    p.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"),
                   help="the dtype the audit runs the model's own forward in, with tolerances by dtype (default fp32)")
    p.add_argument("--out", metavar="FILE", help="the zoo: where its table goes (FILE.csv and FILE.md; a run "
                   "that stopped resumes from FILE.csv)")  # fmt: skip
    p.add_argument("--check", action="append", default=[], metavar="NAME",
                   help="run only this check (repeatable; default: all)")  # fmt: skip
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    p.set_defaults(func=run)
    return p


def load_subject(args: argparse.Namespace) -> tuple[Any, str]:
    """The model to audit and its name, from MODEL, --timm or --hf."""
    given = [flag for flag, value in (("MODEL", args.run_dir), ("--timm", args.timm), ("--hf", args.hf)) if value]
    if len(given) != 1:
        raise ConfigError("audit needs one of MODEL (a run directory), --timm NAME or --hf DIR"
                          + (f", not {' and '.join(given)}" if given else ""))  # fmt: skip
    if (args.weights or args.timm_arg) and not args.timm:
        raise ConfigError("--weights and --timm-arg go with --timm NAME")
    if args.timm:
        from peanchor.adapters import load_timm
        from peanchor.commands.analyze import parse_timm_args

        return load_timm(args.timm, weights=args.weights, **parse_timm_args(args.timm_arg)), f"timm:{args.timm}"
    if args.hf:
        from peanchor.adapters import load_hf_model

        return load_hf_model(args.hf[0]), f"hf:{Path(args.hf[0]).name}"
    from peanchor.checkpoint.files import load_model
    from peanchor.core.errors import CheckpointError

    run = Path(args.run_dir)
    if not run.is_dir():
        raise CheckpointError(f"{run} is not a directory: MODEL is a run directory (peanchor train or import)")
    return load_model(run), run.name


def run(args: argparse.Namespace) -> int:
    from peanchor.audit import CHECKS, audit

    unknown = [c for c in args.check if c not in CHECKS]
    if unknown:  # before a model is read
        raise ConfigError(f"--check {', '.join(unknown)}: unknown; the checks: {', '.join(CHECKS)}")
    if is_zoo(args):
        return run_zoo_command(args)
    if args.out:
        raise ConfigError("--out goes with the zoo: --timm PATTERN or several --hf")
    model, name = load_subject(args)
    report = audit(model, checks=args.check or None, name=name, dtype=args.dtype)
    print(report.table())
    if args.json:
        print(f"wrote {report.save(args.json)}")
    return 0 if report.passed else 1


def is_zoo(args: argparse.Namespace) -> bool:
    """A timm pattern, or more than one --hf (or a family name)."""
    from peanchor.audit.zoo import HF_FAMILIES

    pattern = bool(args.timm) and any(ch in args.timm for ch in "*?[")
    return pattern or bool(args.hf) and (len(args.hf) > 1 or args.hf[0] in HF_FAMILIES)


def run_zoo_command(args: argparse.Namespace) -> int:
    from peanchor.audit.zoo import entries_for, run_zoo

    if not args.out:
        raise ConfigError("the zoo (--timm PATTERN or several --hf) needs --out FILE for its table")
    if args.run_dir or args.weights or args.timm_arg or args.check or args.json:
        raise ConfigError("the zoo takes --timm PATTERN, --hf ..., --dtype and --out only")
    pattern = args.timm if args.timm and any(ch in args.timm for ch in "*?[") else None
    if args.timm and not pattern:
        raise ConfigError("--timm NAME and --hf together: give a pattern for the timm zoo")
    rows = run_zoo(list(entries_for(pattern, args.hf or [])), args.out, dtype=args.dtype, progress=print)
    print(f"wrote {Path(args.out).with_suffix('.csv')} and .md ({len(rows)} rows)")
    return 0 if all(r["result"] != "FAILED" for r in rows) else 1
