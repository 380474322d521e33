"""Import the paper's released checkpoints (Mannes 2026) into peanchor run directories.

The author's checkpoints are ``torch.save`` dicts named like ``{condition}{n}_imagenet_100_60`` whose
``"model"`` entry is a state dict in the layout of their ``VisionTransformer`` (PAPER.md, "The paper's
released checkpoints"). :func:`import_paper` reads one **without unpickling arbitrary objects**
(``torch.load(weights_only=True)`` only), maps it onto ``create_model("vit_paper", ...)``, and writes a
normal run directory::

    RUN/model.safetensors   save_model(...) with metadata imported_from / source_sha256 / condition
    RUN/config.yaml         a TrainConfig of the paper preset, with this model's pe / rpt / sizes; its
                            train.seed is the replicate n of the file name (0 without one): a label
                            only, the author's seeds are not known
    RUN/summary.json        {"status": "finished", "imported_from", "condition", "pe", "rpt", "val_acc": null, ...}

Their key → our key (``i`` = block):

==================================== =========================================================
patcher.conv.{weight,bias}           patch_embed.proj.*        (conv, stride = kernel = patch)
cls_token                            cls_token
pos_embedding.weight [N+1, D]        pe.table [1, N+1, D]      (ape, rpt; ignored otherwise)
sincos_pe [N, D] or [1, N, D]        checked against sincos_2d (spe; ignored otherwise)
cls_pos (CLS position, SPE only)     pe.cls_pe [1, 1, D]       (spe with pe_kwargs cls="learned")
encoder_layers.{i}.0.*               blocks.{i}.norm1.*        (LN1)
encoder_layers.{i}.1.qkv.*           blocks.{i}.attn.qkv.*     (q, k, v in that order)
encoder_layers.{i}.1.proj.*          blocks.{i}.attn.proj.*
feed_forward.{i}.0.*                 blocks.{i}.norm2.*        (LN2)
feed_forward.{i}.1.0.* / .1.3.*      blocks.{i}.mlp.fc1.* / fc2.*
final_feed_forward.*                 head.*                    (no final norm)
==================================== =========================================================

Conditions: ``ape`` → ``ape``; ``rpt`` → ``ape`` (trained with RPT, ``train.rpt: true``); ``spe`` →
``sincos``; ``rope`` → ``rope`` (θ = 10000, the quarter split of PAPER.md is our axial RoPE's layout);
``ablated`` → ``none``.

What the weights can and cannot tell: an SPE checkpoint is recognised by its ``sincos_pe`` buffer
and its CLS position parameter, but the author's model registers ``pos_embedding`` (and, in their
code, ``sincos_pe``) in *every* condition, so APE, RPT, RoPE and ablated checkpoints have the same
keys. The condition therefore comes from ``--condition`` or, failing that, from the file name; a
flag that contradicts the name is refused.

SPE table: the ``sincos_pe`` buffer must equal our :func:`~peanchor.pe.absolute.sincos_2d` table to
1e-5, because our ``sincos`` PE recomputes it rather than storing it. A checkpoint whose buffer differs
is refused, unless ``spe_table="as-ape"``: the buffer (with the CLS row from ``cls_pos``, or zeros)
then becomes the table of an ``ape`` PE. That model computes exactly the same function, α included
(both scale the whole code), but its ``pe`` is ``ape`` and its table would train if fine-tuned.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import yaml
from torch import Tensor

from peanchor import fileio
from peanchor.checkpoint import MODEL_FILE, read_metadata, save_model
from peanchor.conditions import PAPER_CHECKPOINTS
from peanchor.errors import CheckpointError, RunDirError
from peanchor.models import MODEL_SIZES, VisionTransformer, create_model
from peanchor.pe.absolute import sincos_2d

# The paper's condition names (the prefix of its checkpoint files) and the PE each one is.
CONDITIONS: tuple[str, ...] = tuple(PAPER_CHECKPOINTS)
CONDITION_PE: dict[str, str] = {name: c.pe for name, c in PAPER_CHECKPOINTS.items()}
SPE_TABLE_MODES: tuple[str, ...] = ("check", "as-ape")
DEFAULT_NUM_HEADS = 8  # the paper: 8 heads of 48 at width 384
SINCOS_ATOL = 1e-5

CONFIG_FILE = "config.yaml"
SUMMARY_FILE = "summary.json"

# The author's model reads a CLS position parameter as `self.cls_pos`; PAPER.md does not name it, so a
# few spellings are accepted. Only SPE models have one.
CLS_POS_KEYS: tuple[str, ...] = ("cls_pos", "cls_pos_embedding", "cls_pos_embed", "cls_pe")
# Where a torch.save'd dict may nest the state dict, in order of preference.
_NESTED_KEYS = ("model", "state_dict", "model_state_dict")
# Prefixes that wrappers add to every key (DataParallel / DDP, torch.compile).
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")
_NAME_RE = re.compile(rf"^({'|'.join(CONDITIONS)})(\d+)(?:_|$)", re.IGNORECASE)

SpeTableMode = Literal["check", "as-ape"]


# ----------------------------------------------------------------------------------------------
# Reading the file


def load_paper_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The state dict inside ``path``: a ``torch.save`` dict with ``"model"``, or a bare state dict.

    Only ``torch.load(weights_only=True)`` is used: a file that needs arbitrary unpickling (any class
    or callable outside torch's allow-list) is refused with a :class:`CheckpointError` before any of
    its code runs.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist" if not p.exists() else f"{path} is not a file")
    try:
        obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "weights only load failed" in str(e).lower():
            culprit = re.search(r"GLOBAL ([\w.]+)", str(e))
            what = f"it references {culprit.group(1)}" if culprit else "it holds objects other than tensors"
            raise CheckpointError(
                f"{path} needs unsafe unpickling ({what}); "
                "peanchor only loads checkpoints with torch.load(weights_only=True) and will not run code "
                "from a file. Re-save it as torch.save({'model': model.state_dict()}, path)"
            ) from None
        raise CheckpointError(f"{path} is not a readable torch.save file ({first})") from None
    except Exception as e:  # zip / storage errors of truncated or foreign files
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(f"{path} is not a readable torch.save file (truncated or corrupt? {first})") from None
    return _state_dict_of(obj, p)


def _state_dict_of(obj: Any, path: Path) -> dict[str, Tensor]:
    if not isinstance(obj, dict):
        raise CheckpointError(f"{path} holds a {type(obj).__name__}, expected a dict with a 'model' state dict")
    sd: Any = obj
    if not _is_state_dict(obj):
        for key in _NESTED_KEYS:
            if key in obj:
                sd = obj[key]
                break
        else:
            raise CheckpointError(
                f"{path} is a dict without a 'model' entry (keys: {_few(sorted(map(str, obj)))}); "
                "expected torch.save({'model': state_dict}) or a bare state dict"
            )
        if not isinstance(sd, dict) or not _is_state_dict(sd):
            raise CheckpointError(f"{path}: its '{key}' entry is not a state dict of tensors")
    return _strip_wrapper_prefix(dict(sd))


def _is_state_dict(d: dict[Any, Any]) -> bool:
    return bool(d) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in d.items())


def _strip_wrapper_prefix(sd: dict[str, Tensor]) -> dict[str, Tensor]:
    for prefix in _WRAPPER_PREFIXES:
        if all(k.startswith(prefix) for k in sd):
            sd = {k[len(prefix) :]: v for k, v in sd.items()}
    return sd


def condition_from_name(path: str | os.PathLike[str]) -> tuple[str | None, int | None]:
    """``("ape", 3)`` for ``.../APE3_imagenet_100_60.pt``; ``(None, None)`` for any other name.

    >>> condition_from_name("ckpts/rope2_imagenet_100_60")
    ('rope', 2)
    >>> condition_from_name("model.pt")
    (None, None)
    """
    m = _NAME_RE.match(Path(path).name)
    return (m.group(1).lower(), int(m.group(2))) if m else (None, None)


def file_sha256(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------
# Architecture inference and key mapping


@dataclass(frozen=True)
class PaperArch:
    """What the state dict says about the model (plus the head count, which it cannot say)."""

    embed_dim: int
    depth: int
    num_heads: int
    patch_size: int
    grid: int  # patches per side (the author's grid is square)
    num_classes: int
    mlp_hidden: int
    cls_pos_key: str | None = None

    @property
    def img_size(self) -> int:
        return self.grid * self.patch_size

    @property
    def num_patches(self) -> int:
        return self.grid * self.grid


def _shape(sd: dict[str, Tensor], key: str) -> tuple[int, ...]:
    if key not in sd:
        raise CheckpointError(f"the checkpoint has no {key!r}: not the paper's ViT layout")
    return tuple(sd[key].shape)


def infer_arch(sd: dict[str, Tensor], condition: str, num_heads: int | None = None) -> PaperArch:
    """Read width, depth, patch size, grid, classes and MLP width from the tensor shapes."""
    conv = _shape(sd, "patcher.conv.weight")
    if len(conv) != 4 or conv[1] != 3 or conv[2] != conv[3]:
        raise CheckpointError(f"patcher.conv.weight has shape {conv}; expected [D, 3, P, P] (square RGB patches)")
    d, patch = conv[0], conv[2]
    blocks = {int(m.group(1)) for k in sd if (m := re.match(r"encoder_layers\.(\d+)\.", k))}
    if not blocks:
        raise CheckpointError("the checkpoint has no encoder_layers.{i}.* keys: not the paper's ViT layout")
    depth = max(blocks) + 1
    pos = _shape(sd, "pos_embedding.weight")
    n = pos[0] - 1
    if len(pos) != 2 or pos[1] != d or n < 1:
        raise CheckpointError(f"pos_embedding.weight has shape {pos}; expected [N + 1, {d}]")
    grid = math.isqrt(n)
    if grid * grid != n:
        raise CheckpointError(f"pos_embedding.weight has {n} patch rows, not a square grid")
    if "sincos_pe" in sd:
        s = tuple(sd["sincos_pe"].shape)
        if s not in ((n, d), (1, n, d)):
            raise CheckpointError(f"sincos_pe has shape {s}; expected [{n}, {d}] (or [1, {n}, {d}])")
    head = _shape(sd, "final_feed_forward.weight")
    if len(head) != 2 or head[1] != d:
        raise CheckpointError(f"final_feed_forward.weight has shape {head}; expected [num_classes, {d}]")
    fc1 = _shape(sd, "feed_forward.0.1.0.weight")
    if len(fc1) != 2 or fc1[1] != d:
        raise CheckpointError(f"feed_forward.0.1.0.weight has shape {fc1}; expected [hidden, {d}]")
    heads = DEFAULT_NUM_HEADS if num_heads is None else num_heads
    if heads < 1 or d % heads:
        raise CheckpointError(f"width {d} is not divisible by {heads} heads; pass the right --num-heads")
    if condition == "rope" and (d // heads) % 4:
        raise CheckpointError(f"RoPE needs a head dim divisible by 4; {d} / {heads} heads = {d / heads:g}")
    present = [k for k in CLS_POS_KEYS if k in sd]
    if len(present) > 1:
        raise CheckpointError(f"the checkpoint has several CLS position parameters ({', '.join(present)})")
    cls_key = present[0] if present else None
    if cls_key is not None and sd[cls_key].numel() != d:
        raise CheckpointError(f"{cls_key} has shape {tuple(sd[cls_key].shape)}; expected {d} values (one CLS position)")
    return PaperArch(d, depth, heads, patch, grid, head[0], fc1[0], cls_key)


def key_map(arch: PaperArch, condition: str) -> dict[str, str]:
    """Their key → our key, for every tensor that is loaded."""
    m = {
        "patcher.conv.weight": "patch_embed.proj.weight",
        "patcher.conv.bias": "patch_embed.proj.bias",
        "cls_token": "cls_token",
        "final_feed_forward.weight": "head.weight",
        "final_feed_forward.bias": "head.bias",
    }
    for i in range(arch.depth):
        for p in ("weight", "bias"):
            m[f"encoder_layers.{i}.0.{p}"] = f"blocks.{i}.norm1.{p}"
            m[f"encoder_layers.{i}.1.qkv.{p}"] = f"blocks.{i}.attn.qkv.{p}"
            m[f"encoder_layers.{i}.1.proj.{p}"] = f"blocks.{i}.attn.proj.{p}"
            m[f"feed_forward.{i}.0.{p}"] = f"blocks.{i}.norm2.{p}"
            m[f"feed_forward.{i}.1.0.{p}"] = f"blocks.{i}.mlp.fc1.{p}"
            m[f"feed_forward.{i}.1.3.{p}"] = f"blocks.{i}.mlp.fc2.{p}"
    if CONDITION_PE[condition] == "ape":
        m["pos_embedding.weight"] = "pe.table"
    if condition == "spe" and arch.cls_pos_key is not None:
        m[arch.cls_pos_key] = "pe.cls_pe"
    return m


def map_tensors(sd: dict[str, Tensor], arch: PaperArch, condition: str) -> dict[str, Tensor]:
    """Our state dict from theirs (shapes only; no checks): renamed, PE tensors reshaped to ours."""
    tensors = {ours: sd[theirs] for theirs, ours in key_map(arch, condition).items()}
    if "pe.table" in tensors:
        tensors["pe.table"] = tensors["pe.table"].reshape(1, arch.num_patches + 1, arch.embed_dim)  # (1, 1 + N, D)
    if "pe.cls_pe" in tensors:
        tensors["pe.cls_pe"] = tensors["pe.cls_pe"].reshape(1, 1, arch.embed_dim)  # (1, 1, D)
    return tensors


def _ignored_keys(condition: str) -> set[str]:
    """Keys of the layout that this condition does not use (the author registers them everywhere)."""
    ignored = {"sincos_pe"}  # spe: checked, then recomputed by our sincos PE (or loaded as-ape)
    if CONDITION_PE[condition] != "ape":
        ignored.add("pos_embedding.weight")
    return ignored


@dataclass
class Conversion:
    """The result of :func:`convert_paper_state_dict`: the model and how it was made."""

    model: VisionTransformer
    arch: PaperArch
    condition: str
    pe: str
    pe_kwargs: dict[str, Any] = field(default_factory=dict)
    spe_table: str | None = None  # "sincos" (matched our table) or "as-ape"
    sincos_max_abs_diff: float | None = None


def convert_paper_state_dict(
    sd: dict[str, Tensor],
    condition: str,
    *,
    num_heads: int | None = None,
    spe_table: SpeTableMode = "check",
) -> Conversion:
    """Build the peanchor model that computes what the author's model with state dict ``sd`` computes."""
    if condition not in CONDITIONS:
        raise CheckpointError(f"unknown condition {condition!r}; valid: {', '.join(CONDITIONS)}")
    if spe_table not in SPE_TABLE_MODES:
        raise CheckpointError(f"unknown spe_table mode {spe_table!r}; valid: {', '.join(SPE_TABLE_MODES)}")
    sd = _strip_wrapper_prefix(dict(sd))
    arch = infer_arch(sd, condition, num_heads)
    _check_condition(sd, arch, condition)

    mapping = key_map(arch, condition)
    known = set(mapping) | _ignored_keys(condition) | set(CLS_POS_KEYS)
    missing = sorted(set(mapping) - set(sd), key=_natural)
    unknown = sorted(set(sd) - known, key=_natural)
    if missing or unknown:
        parts = ([f"missing {_few(missing)}"] if missing else []) + ([f"unknown {_few(unknown)}"] if unknown else [])
        raise CheckpointError(f"not the paper's ViT layout for condition {condition!r}: {'; '.join(parts)}")

    pe, pe_kwargs, mode, diff = CONDITION_PE[condition], {}, None, None
    tensors = map_tensors(sd, arch, condition)
    if condition == "spe":
        table = sd["sincos_pe"].reshape(arch.num_patches, arch.embed_dim).float()  # (N, D)
        diff = float((table - sincos_2d((arch.grid, arch.grid), arch.embed_dim)).abs().max())
        cls_row = sd[arch.cls_pos_key].reshape(1, arch.embed_dim).float() if arch.cls_pos_key else None
        if diff <= SINCOS_ATOL:
            mode = "sincos"
            pe_kwargs = {"cls": "learned"} if cls_row is not None else {}
        elif spe_table == "check":
            raise CheckpointError(
                f"sincos_pe differs from the paper's 2D sin-cos table (max |diff| {diff:.3g} > {SINCOS_ATOL:g}), "
                "so our sincos PE would compute something else; pass --spe-table as-ape to load it as a fixed "
                "table in an ape PE (same function, but pe='ape')"
            )
        else:
            mode, pe = "as-ape", "ape"
            tensors.pop("pe.cls_pe", None)
            cls_row = cls_row if cls_row is not None else torch.zeros(1, arch.embed_dim)
            tensors["pe.table"] = torch.cat((cls_row, table), dim=0)[None]  # (1, 1 + N, D)

    model = _build(arch, pe, pe_kwargs)
    _load(model, tensors)
    return Conversion(model, arch, condition, pe, pe_kwargs, mode, diff)


def _check_condition(sd: dict[str, Tensor], arch: PaperArch, condition: str) -> None:
    if condition == "spe" and "sincos_pe" not in sd:
        raise CheckpointError(
            "condition 'spe' needs the sincos_pe buffer, and this checkpoint has none: it is not an SPE model "
            f"(one of {', '.join(c for c in CONDITIONS if c != 'spe')}?)"
        )
    if condition != "spe" and arch.cls_pos_key is not None:
        raise CheckpointError(
            f"the checkpoint has a CLS position parameter ({arch.cls_pos_key}), which only SPE models have; "
            f"it looks like --condition spe, not {condition!r}"
        )


def _build(arch: PaperArch, pe: str, pe_kwargs: dict[str, Any]) -> VisionTransformer:
    mlp_ratio = arch.mlp_hidden / arch.embed_dim
    model = create_model(
        "vit_paper",
        pe=pe,
        num_classes=arch.num_classes,
        img_size=arch.img_size,
        patch_size=arch.patch_size,
        pe_kwargs=pe_kwargs,
        embed_dim=arch.embed_dim,
        depth=arch.depth,
        num_heads=arch.num_heads,
        mlp_ratio=mlp_ratio,
        final_norm=False,
        norm_eps=1e-5,  # torch's LayerNorm default, which the author's code uses
        qkv_bias=True,
    )
    if model.blocks[0].mlp.fc1.out_features != arch.mlp_hidden:  # int(D * ratio) rounding
        raise CheckpointError(f"cannot express an MLP width of {arch.mlp_hidden} at width {arch.embed_dim}")
    return model


def _load(model: VisionTransformer, tensors: dict[str, Tensor]) -> None:
    expected = model.state_dict()
    if set(expected) != set(tensors):  # a bug in key_map, not in the user's file
        raise AssertionError(f"key map mismatch: {sorted(set(expected) ^ set(tensors))[:6]}")
    for k, v in expected.items():
        if tuple(tensors[k].shape) != tuple(v.shape):
            raise CheckpointError(
                f"tensor for {k} has shape {tuple(tensors[k].shape)}, the model expects {tuple(v.shape)} "
                "(inconsistent widths in the checkpoint)"
            )
        if not tensors[k].is_floating_point():
            raise CheckpointError(f"tensor for {k} has dtype {tensors[k].dtype}, expected floating point")
    model.load_state_dict({k: t.float() for k, t in tensors.items()}, strict=True)
    model.eval()


def _natural(key: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))


def _few(names: list[str], n: int = 4) -> str:
    shown = ", ".join(names[:n])
    return shown + (f" and {len(names) - n} more" if len(names) > n else "")


# ----------------------------------------------------------------------------------------------
# Writing the run directory


def _train_config(conv: Conversion, seed: int) -> Any:
    """The paper preset, with this model's PE, RPT flag, sizes and resolution."""
    from peanchor.presets import preset_config
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
    out = Path(out_dir)
    _refuse_foreign_run_dir(out)  # before reading a large file for nothing
    sd = load_paper_state_dict(src)
    conv = convert_paper_state_dict(sd, condition, num_heads=num_heads, spe_table=spe_table)
    sha = file_sha256(src)
    config = _train_config(conv, replicate or 0)
    config_text = config.to_yaml()
    model = conv.model
    summary: dict[str, Any] = {
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


__all__ = [
    "CONDITIONS",
    "CONDITION_PE",
    "Conversion",
    "PaperArch",
    "condition_from_name",
    "describe",
    "convert_paper_state_dict",
    "import_paper",
    "infer_arch",
    "key_map",
    "load_paper_state_dict",
    "map_tensors",
]
