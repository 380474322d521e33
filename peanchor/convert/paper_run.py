"""``peanchor import paper``: write one of the paper's released checkpoints as a peanchor run directory.

The conversion itself (reading without unpickling code, architecture inference, the key map, the checks against
our sin-cos table) is :mod:`peanchor.convert.paper`; this module writes its result::

    RUN/model.safetensors   save_model(...) with metadata imported_from / source_sha256 / condition
    RUN/config.yaml         a TrainConfig of the paper preset, with this model's pe / rpt / sizes; its
                            train.seed is the replicate n of the file name (0 without one): a label
                            only, the author's seeds are not known
    RUN/summary.json        {"status": "finished", "imported_from", "condition", "pe", "rpt", "val_acc": null, ...}

Rerunning the same import is a no-op; an ``out_dir`` holding anything else is refused and left untouched.

Imports: :mod:`peanchor.convert.paper`, :mod:`peanchor.checkpoint.files`, :mod:`peanchor.settings.conditions`, :mod:`peanchor.models`,
:mod:`peanchor.presets.catalog`, :mod:`peanchor.training` (the paper preset's config), :mod:`peanchor.core.fileio`.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import yaml

from peanchor.core import fileio
from peanchor.checkpoint.files import MODEL_FILE, read_metadata, save_model
from peanchor.settings.conditions import PAPER_CHECKPOINTS
from peanchor.convert.paper import (
    CONDITIONS,
    Conversion,
    SpeTableMode,
    condition_from_name,
    convert_paper_state_dict,
    load_paper_state_dict,
)
from peanchor.core.errors import CheckpointError, RunDirError
from peanchor.models import MODEL_SIZES

__all__ = ["describe", "file_sha256", "import_paper"]

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _train_config(conv: Conversion, seed: int) -> Any:
    """The paper preset, with this model's PE, RPT flag, sizes and resolution."""
    from peanchor.presets.catalog import preset_config
    from peanchor.training.config import ModelConfig, validate

    config = preset_config("paper")
    size = MODEL_SIZES["vit_paper"]
    a = conv.arch
    arch_values = dict(embed_dim=a.embed_dim, depth=a.depth, num_heads=a.num_heads, mlp_ratio=a.mlp_hidden / a.embed_dim)
    config.model = ModelConfig(
        name="vit_paper",
        pe=conv.pe,
        pe_kwargs=dict(conv.pe_kwargs),
        patch_size=a.patch_size,
        overrides={k: v for k, v in arch_values.items() if size.get(k) != v},
    )
    config.data.img_size = a.img_size
    config.train.rpt = PAPER_CHECKPOINTS[conv.condition].rpt
    config.train.seed = seed
    validate(config)
    return config


def _resolve_condition(src: Path, named: str | None, condition: str | None) -> str:
    """The condition of ``src``: the one its file name says (``named``), checked against ``condition``."""
    if condition is None:
        if named is None:
            raise CheckpointError(
                f"cannot tell the condition from the file name {src.name!r}; pass --condition "
                f"({'|'.join(CONDITIONS)})"
            )
        condition = named
    condition = condition.lower()
    if condition not in CONDITIONS:
        raise CheckpointError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    if named is not None and named != condition:
        raise CheckpointError(
            f"{src.name} is named as a {named!r} checkpoint but --condition is {condition!r}; the weights cannot "
            "tell these apart, so the name wins: fix the flag (or rename the file if the name is wrong)"
        )
    return condition


def _summary(src: Path, out: Path, conv: Conversion, config: Any, condition: str, replicate: int | None,
             sha: str) -> dict[str, Any]:  # fmt: skip
    """summary.json of the imported run: where it came from, what the conversion found, the model's shape."""
    model = conv.model
    return {
        "status": "finished",
        "run_dir": str(out.resolve()),
        "imported_from": str(src.resolve()),
        "source_sha256": sha,
        "source_format": "mannes2026-vit",
        "replicate": replicate,
        "condition": condition,
        "pe": conv.pe,
        "pe_kwargs": conv.pe_kwargs,
        "rpt": config.train.rpt,
        "spe_table": conv.spe_table,
        "sincos_max_abs_diff": conv.sincos_max_abs_diff,
        "model": "vit_paper",
        "preset": "paper",
        "data": config.data.name,
        "seed": config.train.seed,
        "epochs": config.train.epochs,
        "val_acc": None,
        "best_val_acc": None,
        "num_params": sum(p.numel() for p in model.parameters()),
        "num_classes": conv.arch.num_classes,
        "img_size": conv.arch.img_size,
        "num_patches": model.num_patches,
        "model_args": model.model_args,
    }


def import_paper(
    checkpoint: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    condition: str | None = None,
    *,
    num_heads: int | None = None,
    spe_table: SpeTableMode = "check",
) -> dict[str, Any]:
    """Convert one released checkpoint into the run directory ``out_dir``; return its summary.

    ``condition`` defaults to the one in the file name (``ape3_imagenet_100_60`` → ``ape``); a
    ``condition`` that contradicts the name is refused, because the weights cannot tell APE, RPT,
    RoPE and ablated models apart. Rerunning the same import is a no-op (``status``
    ``"already_imported"``); an ``out_dir`` holding anything else is a :class:`RunDirError`.
    """
    src = Path(checkpoint)
    named, replicate = condition_from_name(src)
    condition = _resolve_condition(src, named, condition)
    out = Path(out_dir)
    _refuse_foreign_run_dir(out)  # before reading a large file for nothing
    sd = load_paper_state_dict(src)
    try:
        conv = convert_paper_state_dict(sd, condition, num_heads=num_heads, spe_table=spe_table)
    except CheckpointError as e:  # say which file does not fit
        raise CheckpointError(f"{src}: {e}") from None
    sha = file_sha256(src)
    config = _train_config(conv, replicate or 0)
    config_text = config.to_yaml()
    model = conv.model
    summary = _summary(src, out, conv, config, condition, replicate, sha)
    metadata = {
        "imported_from": summary["imported_from"],
        "source_sha256": sha,
        "condition": condition,
        "config": config.to_dict(),
        "val_acc": None,
        "epochs": config.train.epochs,
    }
    with fileio.RunLock(out):
        state = _existing_import(out, summary, config_text)
        if state == "done":
            return {**_read_json(out / SUMMARY_FILE), "status": "already_imported"}
        if state != "model_written":
            save_model(model, out / MODEL_FILE, extra_metadata=metadata)
        fileio.write_text(out / CONFIG_FILE, config_text)
        fileio.write_json(out / SUMMARY_FILE, summary)  # last: marks the directory finished
    return summary


# Fields of summary.json that decide what the directory holds (the rest follow from them).
_IDENTITY_KEYS = ("source_sha256", "condition", "pe", "pe_kwargs", "rpt", "spe_table", "model_args")


def _refuse_foreign_run_dir(out: Path) -> None:
    """A quick look before any work: metrics.csv or resume state mean a training run lives here."""
    if out.exists() and not out.is_dir():
        raise RunDirError(f"{out} exists and is not a directory; choose another --out")
    for name in ("metrics.csv", "checkpoint"):
        if (out / name).exists():
            raise RunDirError(f"{out} holds a training run ({name}); an import needs its own --out")


def _existing_import(out: Path, summary: dict[str, Any], config_text: str) -> str:
    """``"fresh"``, ``"model_written"`` (an interrupted import of the same file) or ``"done"``.

    Anything else already in ``out`` is a :class:`RunDirError`, and the directory is left untouched.
    """
    _refuse_foreign_run_dir(out)
    if (out / SUMMARY_FILE).exists():
        old = _read_json(out / SUMMARY_FILE)
        diff = [k for k in _IDENTITY_KEYS if old.get(k) != json.loads(json.dumps(summary[k]))]
        if diff:
            raise RunDirError(
                f"{out} already holds a different run ({', '.join(f'{k}: {old.get(k)!r}' for k in diff[:3])}); "
                "choose another --out"
            )
        if not (out / MODEL_FILE).exists() or not (out / CONFIG_FILE).exists():
            raise RunDirError(f"{out} has a summary.json but lacks {MODEL_FILE} or {CONFIG_FILE}; choose another --out")
        _same_config(out, config_text)
        return "done"
    if (out / CONFIG_FILE).exists():
        _same_config(out, config_text)
    if (out / MODEL_FILE).exists():
        meta = read_metadata(out / MODEL_FILE)
        same = meta.get("source_sha256") == summary["source_sha256"] and meta.get("model_args") == summary["model_args"]
        if not same:
            raise RunDirError(f"{out / MODEL_FILE} holds a different model; choose another --out")
        return "model_written"
    return "fresh"


def _same_config(out: Path, config_text: str) -> None:
    try:
        old = yaml.safe_load((out / CONFIG_FILE).read_text())
    except (OSError, yaml.YAMLError) as e:
        raise RunDirError(f"cannot read {out / CONFIG_FILE} ({e}); choose another --out") from None
    if old != yaml.safe_load(config_text):
        raise RunDirError(f"{out} holds a run with a different {CONFIG_FILE}; choose another --out")


def _read_json(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise RunDirError(f"{path} is unreadable ({e}); choose another --out") from None
    if not isinstance(value, dict):
        raise RunDirError(f"{path} is not a run summary; choose another --out")
    return value


def describe(summary: dict[str, Any]) -> str:
    """One line for the CLI: ``condition ape → pe ape, D=384 depth=12 heads=8 patch=16 224 px, 100 classes``."""
    a = summary["model_args"]
    extra = f" {summary['pe_kwargs']}" if summary.get("pe_kwargs") else ""
    rpt = " (trained with RPT)" if summary.get("rpt") else ""
    return (
        f"condition {summary['condition']} → pe {summary['pe']}{extra}{rpt}, D={a['embed_dim']} depth={a['depth']} "
        f"heads={a['num_heads']} patch={a['patch_size']} {a['img_size']} px, {a['num_classes']} classes"
    )
