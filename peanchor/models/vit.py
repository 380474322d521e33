"""A plain pre-LN Vision Transformer that delegates everything positional to a PE module.

Read top-down: attention → MLP → block → model. Interventions are arguments of ``forward``:
``token_perm`` reorders patch content across slots before the PE is applied, and ``pe_scale`` is the
paper's α. The SSDC probe point (each block's LN1 output) comes from the same forward pass, and so do the
attention weights when an analysis asks for them (``attention=``): SDPA does not return its weights, so such a
pass computes the attention as SDPA's math written out (softmax of q·kᵀ/√d plus the attention bias, from q
and k after RoPE, CLS included as a key; then @ v) and hands the weights on. Its logits equal the fused
pass's to float rounding.

Imports: torch; :mod:`peanchor.pe`, :mod:`peanchor.interventions`, :mod:`peanchor.models` (args, interface, template).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchvision.ops import StochasticDepth

from peanchor.interventions import (
    BLOCK_SITES,
    EditPass,
    HookPoints,
    Intervention,
    PETable,
    Plane,
    RopeTables,
    permute_tokens,
)
from peanchor.interventions.edit import check_grid
from peanchor.models.args import ViTArgs
from peanchor.models.interface import AttentionSink
from peanchor.models.template import BlockStep, TemplatePass
from peanchor.pe import PEContext, RotaryTables, create_pe
from peanchor.pe.base import BlockRotation

#: An edit pass's hook inside a block: ``site(name, x)`` for name in ``attn.heads``, ``attn``, ``mlp``.
Site = Callable[[str, Tensor], Tensor]


@dataclass(frozen=True)
class BlockPass:
    """What one block needs to know of the pass it is part of, besides its input: the PE's rotation and attention
    bias for this block (None: the PE has none), the prefix tokens (CLS) that rotation skips, where the attention
    weights go when an analysis reads them, and an edit pass's hook (docs/interventions.md)."""

    rope: RotaryTables | None = None
    bias: Tensor | None = None  # (H, T, T)
    rotation: BlockRotation | None = None  # a general rotation of q and k after ``rope`` (LieRE, ComRoPE, STRING)
    num_prefix: int = 1
    weights_sink: Callable[[Tensor], None] | None = None
    site: Site | None = None

# Attention weights materialised at a time when an analysis asks for them (floats): about 1 MB on the CPU.
_CPU_WEIGHT_CHUNK = 1 << 18
_WEIGHT_CHUNK = 1 << 28


class Attention(nn.Module):
    def __init__(self, dim: int, num_heads: int, qkv_bias: bool = True, attn_drop: float = 0.0, proj_drop: float = 0.0):
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} is not divisible by num_heads {num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=qkv_bias)
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: Tensor, ctx: BlockPass) -> Tensor:
        b, t, d = x.shape
        rope, bias, site = ctx.rope, ctx.bias, ctx.site
        # One Linear, split into q, k, v in that order, each (heads, head_dim): the paper's layout.
        q, k, v = self.qkv(x).view(b, t, 3, self.num_heads, d // self.num_heads).permute(2, 0, 3, 1, 4)  # (B, H, T, hd)
        if rope is not None:
            q, k = rope.apply(q, ctx.num_prefix), rope.apply(k, ctx.num_prefix)
        if ctx.rotation is not None:
            q, k = ctx.rotation.apply(q, ctx.num_prefix), ctx.rotation.apply(k, ctx.num_prefix)
        if bias is not None:
            bias = bias.to(q.dtype)
        if ctx.weights_sink is None:
            x = F.scaled_dot_product_attention(
                q, k, v, attn_mask=bias, dropout_p=self.attn_drop if self.training else 0.0
            )  # (B, H, T, hd)
        else:
            x = self._attention_with_weights(q, k, v, bias, ctx.weights_sink)
        heads = x.transpose(1, 2)  # (B, T, H, hd)
        if site is not None:
            heads = site("attn.heads", heads)
        return self.proj_drop(self.proj(heads.reshape(b, t, d)))


    def _attention_with_weights(
        self, q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, sink: Callable[[Tensor], None]
    ) -> Tensor:
        """SDPA's math written out, so that its weights can be handed to ``sink``: the same q, k, bias and scale.

        Images go through in chunks whose (c, H, T, T) weights stay in the CPU's cache (one image at 224 px), which
        keeps the written-out attention close to the fused kernel's speed; ``sink`` gets each chunk in turn.
        """
        b, h, t, _ = q.shape
        budget = _CPU_WEIGHT_CHUNK if q.device.type == "cpu" else _WEIGHT_CHUNK
        chunk = max(1, budget // (h * t * t))
        out = []
        for start in range(0, b, chunk):
            part = slice(start, start + chunk)
            logits = torch.matmul(q[part], k[part].transpose(-2, -1)).mul_(q.shape[-1] ** -0.5)  # (c, H, T, T)
            if bias is not None:
                logits += bias
            weights = logits.softmax(dim=-1)
            sink(weights)
            out.append(torch.matmul(F.dropout(weights, self.attn_drop, self.training), v[part]))  # (c, H, T, hd)
        return torch.cat(out) if len(out) > 1 else out[0]  # (B, H, T, hd)


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int, drop: float = 0.0):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


class Block(nn.Module):
    """Pre-LN block: ``x += attn(LN1(x)); x += mlp(LN2(x))``. Also returns LN1(x), the SSDC probe."""

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mlp_ratio: float,
        drop: float,
        attn_drop: float,
        drop_path: float,
        norm_eps: float,
        qkv_bias: bool,
    ):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qkv_bias, attn_drop, drop)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), drop)
        self.drop_path = StochasticDepth(drop_path, "row")

    def forward(self, x: Tensor, ctx: BlockPass = BlockPass()) -> tuple[Tensor, Tensor]:
        h = self.norm1(x)  # (B, T, D): what attention sees
        attn = self.attn(h, ctx)  # (B, T, D)
        site = ctx.site
        x = x + self.drop_path(attn if site is None else site("attn", attn))
        mlp = self.mlp(self.norm2(x))  # (B, T, D)
        x = x + self.drop_path(mlp if site is None else site("mlp", mlp))
        return x, h


class PatchEmbed(nn.Module):
    def __init__(self, img_size: int, patch_size: int, dim: int):
        super().__init__()
        if img_size % patch_size:
            raise ValueError(f"img_size {img_size} is not a multiple of patch_size {patch_size}")
        self.grid = (img_size // patch_size, img_size // patch_size)
        self.proj = nn.Conv2d(3, dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, D), row-major slots


class VisionTransformer(TemplatePass, nn.Module):
    """ViT with a CLS token and a pluggable positional encoding (``self.pe``)."""

    num_prefix = 1
    has_attention_weights = True

    def __init__(self, args: ViTArgs):
        super().__init__()
        if not isinstance(args, ViTArgs):
            raise TypeError(f"VisionTransformer(args) takes a ViTArgs (create_model builds one), got {type(args).__name__}")
        a = args
        self.args = args  # the checkpoint's model_args
        self.patch_embed = PatchEmbed(a.img_size, a.patch_size, a.embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, a.embed_dim))
        ctx = PEContext(embed_dim=a.embed_dim, num_heads=a.num_heads, depth=a.depth, grid=self.patch_embed.grid)
        self.pe = create_pe(a.pe, ctx, **dict(a.pe_kwargs))
        self.pos_drop = nn.Dropout(a.drop_rate)
        dpr = torch.linspace(0, a.drop_path_rate, a.depth).tolist()  # stochastic depth grows with depth
        self.blocks = nn.ModuleList(Block(a.embed_dim, a.num_heads, a.mlp_ratio, a.drop_rate, a.attn_drop_rate, p,
                                          a.norm_eps, a.qkv_bias) for p in dpr)  # fmt: skip
        self.norm = nn.LayerNorm(a.embed_dim, eps=a.norm_eps) if a.final_norm else nn.Identity()
        self.head_drop = nn.Dropout(a.drop_rate if a.head_drop_rate is None else a.head_drop_rate)  # on the CLS token
        self.head = nn.Linear(a.embed_dim, a.num_classes)
        self._init_weights()

    @classmethod
    def from_args(cls, args: ViTArgs) -> VisionTransformer:
        """The model ``args`` describe (what ``create_model`` and ``load_model`` build): ``VisionTransformer(args)``."""
        return cls(args)

    @property
    def model_args(self) -> dict[str, Any]:
        """``args`` in JSON form, as a checkpoint stores them: ``create_model(**model_args)`` rebuilds this model."""
        return self.args.to_dict()

    def _init_weights(self) -> None:
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv2d)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    # ---- what the analysis reads (AnalysisInterface) --------------------------------------------------

    @property
    def grid(self) -> tuple[int, int]:
        return self.patch_embed.grid

    @property
    def depth(self) -> int:
        return len(self.blocks)

    @property
    def img_size(self) -> tuple[int, int]:
        return self.args.img_size, self.args.img_size

    @property
    def num_classes(self) -> int:
        return self.head.out_features

    @property
    def pe_name(self) -> str:
        return self.pe.name

    @property
    def pe_scalable(self) -> bool:
        return bool(self.pe.scalable)  # the PE class says

    # ---- the pass's steps (TemplatePass runs them) ------------------------------------------------

    def _embed(self, images: Tensor, intervention: Intervention, run: EditPass | None) -> Tensor:
        """The stream entering block 0: patches (permuted), CLS, the PE's table (edited) at α."""
        if run is not None:
            check_grid(images, run.grid, self.patch_embed.proj.kernel_size)
        x = self.patch_embed(images)  # (B, N, D)
        if intervention.token_perm is not None:
            x = permute_tokens(x, intervention.token_perm)  # content moves, slots (and their PE) stay
        x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)  # (B, 1 + N, D)
        if run is not None and run.acts_at("pe.table"):
            return self.pos_drop(self._edited_table(run, intervention.pe_scale).added_to(x))
        return self.pos_drop(self.pe.add(x, intervention.pe_scale))

    @contextmanager
    def _blocks(
        self, intervention: Intervention, run: EditPass | None, attention: AttentionSink | None
    ) -> Iterator[BlockStep]:
        """Each block with the PE's rotation and bias at α (edited), the edits' sites and the attention sink."""
        alpha = intervention.pe_scale
        rope = self.pe.rotary(alpha) if run is None or not run.acts_at("rope.tables") else self._edited_rope(run, alpha)
        bias, rotation = self._bias_and_rotation(run, alpha)

        def step(i: int, x: Tensor) -> tuple[Tensor, Tensor]:
            x, h = self.blocks[i](x, BlockPass(
                rope=rope.layer(i) if rope is not None else None,
                bias=bias[i if bias.shape[0] > 1 else 0] if bias is not None else None,
                rotation=rotation.layer(i) if rotation is not None else None,
                num_prefix=self.num_prefix,
                weights_sink=functools.partial(attention, i) if attention is not None else None,
                site=run.at_layer(i) if run is not None else None,
            ))  # fmt: skip
            return self.pe.after_block(i, x, alpha), h

        yield step

    def _probe(self, index: int, x: Tensor) -> Tensor:
        return self.blocks[index].norm1(x)  # (B, 1 + N, D)

    def _head(self, x: Tensor) -> Tensor:
        return self.head(self.head_drop(self.norm(x)[:, 0]))  # (B, C)

    # ---- hook points (docs/interventions.md) ------------------------------------------------------

    @property
    def hook_points(self) -> HookPoints:
        points = {f"blocks.{{k}}.{site}" for site in BLOCK_SITES}
        points |= {"pe.table"} if self.pe.has_table else set()
        points |= {"rope.tables"} if self.pe.has_rotary else set()
        points |= {"pe.bias"} if self.pe.has_bias else set()
        points |= {"pe.rotation"} if self.pe.has_rotation else set()
        points |= {"input.grid"} if self.pe.any_grid else set()
        heads = self.blocks[0].attn.num_heads
        head_dim = self.patch_embed.proj.out_channels // heads
        planes = _rope_planes(self.pe.rotary(1.0), head_dim) if self.pe.has_rotary else ()
        return HookPoints(f"peanchor:{self.pe_name}", frozenset(points), self.depth, heads, self.grid, self.num_prefix,
                          planes)  # fmt: skip

    def _edited_table(self, run: EditPass, alpha: float) -> PETable:
        rows = self.pe.table_rows(alpha)
        assert rows is not None  # pe.table is a hook point only of a PE with a table
        return run.table(PETable(rows[0], rows[1], self.grid))

    def _bias_and_rotation(self, run: EditPass | None, alpha: float) -> tuple[Tensor | None, BlockRotation | None]:
        """The PE's attention bias ``(L|1, H, T, T)`` and general rotation ``(L|1, H|1, N, nb, b, b)`` (None: none),
        built at the pass's positions and edited when an edit acts at ``pe.bias`` / ``pe.rotation``."""
        positions = run.positions() if run is not None else None
        if run is not None and run.acts_at("pe.bias"):
            bias = self.pe.attn_bias(alpha) if positions is None else self.pe.attn_bias_at(alpha, *positions)
            bias = run.bias(bias)
        else:
            bias = self.pe.attn_bias(alpha)
        if run is not None and run.acts_at("pe.rotation"):
            turn = self.pe.rotation(alpha) if positions is None else self.pe.rotation_at(alpha, *positions)
            rotation = run.rotation(turn)
        else:
            rotation = self.pe.rotation(alpha)
        return bias, rotation

    def _edited_rope(self, run: EditPass, alpha: float) -> RotaryTables:
        positions = run.positions()
        tables = self.pe.rotary(alpha) if positions is None else self.pe.rotary_at(alpha, *positions)
        assert tables is not None  # rope.tables is a hook point only of a PE with a rotation
        edited = run.rope(RopeTables(tables.cos, tables.sin, run.hooks.planes))
        return RotaryTables(edited.cos, edited.sin, tables.groups)


def _rope_planes(tables: RotaryTables | None, head_dim: int) -> tuple[Plane, ...]:
    """The planes of our rotate-half layout: ``groups`` chunks, channel ``j`` of a chunk paired with ``j + chunk/2``;
    two groups are axial RoPE (x on the first half of the head, y on the second), one is RoPE-Mixed (no single axis).
    Our frequencies fall with the index, so index 0 is the fastest plane."""
    assert tables is not None
    chunk = head_dim // tables.groups
    axes = ("x", "y") if tables.groups == 2 else (None,)
    return tuple(Plane(axis, j, (g * chunk + j, g * chunk + j + chunk // 2))
                 for g, axis in enumerate(axes) for j in range(chunk // 2))  # fmt: skip
