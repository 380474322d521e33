"""Convert the paper's released checkpoints (Mannes 2026) into peanchor models (the run directory an import
writes: :mod:`peanchor.convert.paper_run`).

The author's checkpoints are ``torch.save`` dicts named like ``{condition}{n}_imagenet_100_60`` whose
``"model"`` entry is a state dict in the layout of their ``VisionTransformer`` (docs/study.md, "The paper's
released checkpoints"). :func:`load_paper_state_dict` reads one **without unpickling arbitrary objects**
(``torch.load(weights_only=True)`` only; the same tensors saved as safetensors are read too) and
:func:`convert_paper_state_dict` maps it onto
``create_model("vit_paper", ...)``.

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
``sincos``; ``rope`` → ``rope`` (θ = 10000, the quarter split of docs/study.md is our axial RoPE's layout);
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

Imports: :mod:`peanchor.models`, :mod:`peanchor.pe` (the sin-cos table), :mod:`peanchor.checkpoint.weights`,
:mod:`peanchor.settings.conditions` (the paper's names).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor

from peanchor.settings.conditions import PAPER_CHECKPOINTS
from peanchor.core.errors import CheckpointError
from peanchor.models import VisionTransformer, create_model
from peanchor.pe.absolute import sincos_2d
from peanchor.checkpoint.weights import (
    extract_state_dict,
    few,
    file_format,
    load_pickled,
    load_strict,
    read_safetensors,
    strip_wrapper_prefixes,
)

# The paper's condition names (the prefix of its checkpoint files) and the PE each one is.
CONDITIONS: tuple[str, ...] = tuple(PAPER_CHECKPOINTS)
CONDITION_PE: dict[str, str] = {name: c.pe for name, c in PAPER_CHECKPOINTS.items()}
SPE_TABLE_MODES: tuple[str, ...] = ("check", "as-ape")
DEFAULT_NUM_HEADS = 8  # the paper: 8 heads of 48 at width 384
SINCOS_ATOL = 1e-5

# The author's model reads a CLS position parameter as `self.cls_pos`; the paper does not name it, so a
# few spellings are accepted. Only SPE models have one.
CLS_POS_KEYS: tuple[str, ...] = ("cls_pos", "cls_pos_embedding", "cls_pos_embed", "cls_pe")
# Where a torch.save'd dict may nest the state dict, in order of preference.
_NESTED_KEYS = ("model", "state_dict", "model_state_dict")
_NAME_RE = re.compile(rf"^({'|'.join(CONDITIONS)})(\d+)(?:_|$)", re.IGNORECASE)

SpeTableMode = Literal["check", "as-ape"]


# ----------------------------------------------------------------------------------------------
# Reading the file


# What `peanchor import paper` reads, for the messages that refuse anything else.
EXPECTED_FILE = (
    "one of the paper's released checkpoints (a torch.save dict whose 'model' entry is the state dict, or a bare "
    "state dict), or a .safetensors file of that state dict"
)
LAYOUT_KEYS = (
    "patcher.conv.*, cls_token, pos_embedding.weight, encoder_layers.{i}.*, feed_forward.{i}.*, final_feed_forward.*"
)


def load_paper_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The state dict inside ``path``: a ``torch.save`` dict with ``"model"``, a bare state dict, or the same
    tensors saved as safetensors.

    Only ``torch.load(weights_only=True)`` is used: a file that needs arbitrary unpickling (any class
    or callable outside torch's allow-list) is refused with a :class:`CheckpointError` before any of
    its code runs (see :mod:`peanchor.checkpoint.weights`). A file that is neither (random bytes) is refused by its
    first bytes, naming the file and what was expected.
    """
    p = Path(path)
    if not p.is_file():
        raise CheckpointError(f"checkpoint {path} does not exist" if not p.exists() else f"{path} is not a file")
    if file_format(p) == "safetensors":
        tensors, _ = read_safetensors(p)
        return strip_wrapper_prefixes(tensors)
    return extract_state_dict(load_pickled(p, EXPECTED_FILE), p, _NESTED_KEYS)


def condition_from_name(path: str | os.PathLike[str]) -> tuple[str | None, int | None]:
    """``("ape", 3)`` for ``.../APE3_imagenet_100_60.pt``; ``(None, None)`` for any other name.

    >>> condition_from_name("ckpts/rope2_imagenet_100_60")
    ('rope', 2)
    >>> condition_from_name("model.pt")
    (None, None)
    """
    m = _NAME_RE.match(Path(path).name)
    return (m.group(1).lower(), int(m.group(2))) if m else (None, None)


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
        raise CheckpointError(f"the checkpoint has no {key!r}: not the paper's ViT layout (expected {LAYOUT_KEYS})")
    return tuple(sd[key].shape)


def infer_arch(sd: dict[str, Tensor], condition: str, num_heads: int | None = None) -> PaperArch:
    """Read width, depth, patch size, grid, classes and MLP width from the tensor shapes."""
    conv = _shape(sd, "patcher.conv.weight")
    if len(conv) != 4 or conv[1] != 3 or conv[2] != conv[3]:
        raise CheckpointError(f"patcher.conv.weight has shape {conv}; expected [D, 3, P, P] (square RGB patches)")
    d, patch = conv[0], conv[2]
    blocks = {int(m.group(1)) for k in sd if (m := re.match(r"encoder_layers\.(\d+)\.", k))}
    if not blocks:
        raise CheckpointError(f"the checkpoint has no encoder_layers.{{i}}.* keys: not the paper's ViT layout "
                              f"(expected {LAYOUT_KEYS})")
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
    sd = strip_wrapper_prefixes(sd)
    arch = infer_arch(sd, condition, num_heads)
    _check_condition(sd, arch, condition)

    mapping = key_map(arch, condition)
    known = set(mapping) | _ignored_keys(condition) | set(CLS_POS_KEYS)
    missing = sorted(set(mapping) - set(sd), key=_natural)
    unknown = sorted(set(sd) - known, key=_natural)
    if missing or unknown:
        parts = ([f"missing {few(missing)}"] if missing else []) + ([f"unknown {few(unknown)}"] if unknown else [])
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
    for k, t in tensors.items():
        if not t.is_floating_point():
            raise CheckpointError(f"tensor for {k} has dtype {t.dtype}, expected floating point")
    floats = {k: t.float() for k, t in tensors.items()}
    load_strict(model, floats, "the checkpoint does not fit the model its shapes describe (inconsistent widths?)")
    model.eval()


def _natural(key: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", key))


__all__ = [
    "CONDITIONS",
    "SPE_TABLE_MODES",
    "CONDITION_PE",
    "Conversion",
    "PaperArch",
    "condition_from_name",
    "convert_paper_state_dict",
    "infer_arch",
    "key_map",
    "load_paper_state_dict",
    "map_tensors",
]
