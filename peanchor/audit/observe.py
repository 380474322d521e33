"""The audit watches a model's own forward: forward hooks on the model's own modules record what its PE code handed
on (the tokens entering block 0, the rotary table each block receives, q and k before the rotation, the attention
weights of the eager path, every block's output, the logits), and, for the reference pass, replace the two places
where position enters with peanchor's reference (:mod:`peanchor.audit.reference`): the tokens entering block 0
(prefix tokens and table assembled as declared) and the attention weights (``softmax(rot(q)·rot(k)ᵀ·scale)`` from
the q and k the model made, rotated by the declared angles and layout). Everything else in the reference pass is
the model's own modules, so a difference between the two passes is in the PE code the model runs.

Patching what the model calls (``timm.models.eva.apply_rot_embed_cat``, an instance's ``_pos_embed``, a
transformers embeddings' ``forward``) changes the recorded pass, never the reference.

Imports: torch; :mod:`peanchor.audit.own_forward` (the base every observer fills in); the wrapped timm and
transformers models are handed in by their backends (the adapters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from peanchor.audit.own_forward import (  # the shared base and hooks (re-exported: Pass, other_grids)
    OwnForward,
    Pass,
    _Stop,
    as_tensor,
    first_arg,
    hooks,
    identity_rope,
    other_grids,
    permute_patches,
    same_token_hooks,
    zeroed,
)
from peanchor.audit.reference import RotaryReference, reference_probs  # re-exported: the reference pass's weights

__all__ = ["HFObserver", "Pass", "TimmObserver", "other_grids", "reference_probs"]


class TimmObserver(OwnForward):
    """Watches a timm ViT or Eva (``wrapped.model``) through hooks on its own modules."""

    backend = "timm"

    def __init__(self, wrapped: Any) -> None:
        self.inner = wrapped.model
        self.blocks = list(self.inner.blocks)
        self.attns = [getattr(b, "attn", None) for b in self.blocks]
        self.prefix = int(self.inner.num_prefix_tokens)
        self.rope = getattr(self.inner, "rope", None)
        self.native_grid = tuple(int(s) for s in self.inner.patch_embed.grid_size)
        self.dynamic = bool(getattr(self.inner, "dynamic_img_size", False))

    def missing(self) -> str | None:
        """Why the attention cannot be watched (None: it can)."""
        for a in self.attns:
            names = ("q_norm", "k_norm", "attn_drop")
            if a is None or not all(isinstance(getattr(a, n, None), nn.Module) for n in names):
                return f"a block's attention ({type(a).__name__}) has no q_norm, k_norm and attn_drop modules to watch"
        return None

    def grids(self) -> list[tuple[int, int]]:
        """The grids it runs at: its own, and a non-square other one where its forward takes other sizes."""
        return other_grids(self.native_grid) if self.dynamic else [self.native_grid]

    def qk_hooks(self, attn: nn.Module, layer: int, seen: Pass) -> list[Any]:
        """Hooks that record a block's q and k ``(B, H, T, hd)`` before the rotation (after timm's q/k norms)."""
        return [attn.q_norm.register_forward_hook(lambda _m, _a, out: seen.q.__setitem__(layer, out)),
                attn.k_norm.register_forward_hook(lambda _m, _a, out: seen.k.__setitem__(layer, out))]

    def scale(self, layer: int) -> float:
        return float(self.attns[layer].scale)

    def rotary_cos_sin(self, seen: Pass, layer: int) -> tuple[Tensor, Tensor] | None:
        emb = seen.tables.get(layer)  # timm hands each block cat([sin, cos])
        return None if not isinstance(emb, Tensor) else tuple(emb.double().chunk(2, dim=-1))[::-1]  # type: ignore

    def declared_rope(self, grid: tuple[int, int]) -> RotaryReference | str | None:
        from peanchor.audit.reference import timm_rope_reference

        if self.rope is None:
            return None
        return timm_rope_reference(self.rope, grid, 0)

    #: How the table is resampled off the native grid, as timm documents it (``resample_abs_pos_embed``).
    resample = ("bicubic", True)

    def reference_embedding(self, patches: Tensor, grid: tuple[int, int], resample: tuple | None = None) -> Tensor:
        """timm's ``_pos_embed`` as declared: CLS, then the distillation token or registers, then the patches; the
        table (``pos_embed``) resampled to the grid by bicubic, antialiased ``F.interpolate`` (timm's documented default), over the
        prefix too unless ``no_embed_class``; then the model's own ``norm_pre``."""
        from peanchor.audit.reference import resample_table

        inner, b = self.inner, patches.shape[0]
        tokens = [getattr(inner, n, None) for n in ("cls_token", "dist_token", "reg_token")]
        to_cat = [t.expand(b, -1, -1) for t in tokens if t is not None]  # CLS, DeiT's distillation token, registers
        table = getattr(inner, "pos_embed", None)
        x = patches
        if table is not None:
            rows = 0 if getattr(inner, "no_embed_class", False) else self.prefix
            mode, antialias = resample or self.resample
            own = resample_table(table[:, rows:], self.native_grid, grid, mode, antialias).to(patches.dtype)
            if rows:
                x = torch.cat(to_cat + [x], dim=1) + torch.cat([table[:, :rows], own], dim=1)
                to_cat = []
            else:
                x = x + own
        x = torch.cat(to_cat + [x], dim=1) if to_cat else x
        norm = getattr(inner, "norm_pre", None)  # BEiT has none
        return x if norm is None else norm(x)

    @property
    def module(self) -> nn.Module:
        return self.inner

    def tables(self) -> list[Tensor]:
        """The learned table parameters (``pos_embed``), which removing the PE zeroes."""
        table = getattr(self.inner, "pos_embed", None)
        return [table] if isinstance(table, Tensor) else []

    def run(self, images: Tensor, *, eager: bool, reference: Callable | None = None, same: bool = False,
            perm: Tensor | None = None, remove: bool = False, stop: bool = False) -> Pass:  # fmt: skip
        """One forward of ``images``, recorded; ``reference``: ``(pass, layer) -> probs`` and the embedding are
        peanchor's (the reference pass). ``perm``: the patch tokens permuted right after the patch embedding (the
        PE stays with the slots); ``remove``: the table zeroed and every block handed the rotary table of no
        rotation; ``stop``: the pass ends once block 0's input is recorded."""
        seen = Pass()
        handles: list[Any] = []
        grid = (images.shape[-2] // self.patch, images.shape[-1] // self.patch)

        def on_patches(_m: nn.Module, _a: Any, out: Tensor) -> Tensor:
            out = permute_patches(out, perm)
            seen.tables["patches"] = out.reshape(out.shape[0], -1, out.shape[-1])  # (B, N, D)
            return out

        def enter(layer: int) -> Callable:
            def hook(_m: nn.Module, args: tuple, kwargs: dict) -> Any:
                if isinstance(kwargs.get("rope"), Tensor) and remove:
                    kwargs = {**kwargs, "rope": identity_rope(kwargs["rope"])}
                if "rope" in kwargs:
                    seen.tables[layer] = kwargs["rope"]
                if layer == 0:
                    x = first_arg(args, kwargs, "x")
                    if reference is not None:
                        x = self.reference_embedding(seen.tables["patches"], grid).to(x.dtype)
                        args = (x, *args[1:]) if args else args
                        kwargs = kwargs if args else {**kwargs, "x": x}
                    seen.tokens.append(x)
                    if stop:
                        raise _Stop
                return args, kwargs

            return hook

        def weights(layer: int) -> Callable:
            def hook(_m: nn.Module, _a: Any, out: Tensor) -> Tensor:
                if reference is not None:
                    out = reference(seen, layer).to(out.dtype)
                seen.probs[layer] = out
                return out

            return hook

        handles.append(self.inner.patch_embed.register_forward_hook(on_patches))
        watched = self.missing() is None
        for layer, (block, attn) in enumerate(zip(self.blocks, self.attns)):
            handles.append(block.register_forward_pre_hook(enter(layer), with_kwargs=True))
            handles.append(block.register_forward_hook(lambda _m, _a, out: seen.tokens.append(as_tensor(out))))
            if not watched:
                continue
            handles += self.qk_hooks(attn, layer, seen)
            handles.append(attn.attn_drop.register_forward_hook(weights(layer)))
        if same:
            handles += same_token_hooks(self.attns, "x")
        saved = [getattr(a, "fused_attn", False) for a in self.attns]
        try:
            with hooks(handles), zeroed(self.tables() + self.bias_tables() if remove else []):
                for a, fused in zip(self.attns, saved):
                    if hasattr(a, "fused_attn"):
                        a.fused_attn = fused and not (eager or reference is not None)
                try:
                    seen.logits = self.inner(images)
                except _Stop:
                    pass
                except Exception as e:  # noqa: BLE001  (the model's code failed on the probe: a finding)
                    seen.error = e
        finally:
            for a, fused in zip(self.attns, saved):
                if hasattr(a, "fused_attn"):
                    a.fused_attn = fused
        return seen

    @property
    def patch(self) -> int:
        return int(self.inner.patch_embed.patch_size[0])


class HFObserver(OwnForward):
    """Watches a transformers vision model (``wrapped``: the hf adapter) through hooks on its own modules."""

    backend = "transformers"

    def __init__(self, wrapped: Any) -> None:
        self.wrapped = wrapped
        self.family = wrapped.family
        self.backbone = wrapped._backbone
        self.layers = list(self.backbone.get_submodule(self.family.layers))
        self.attns = [layer.get_submodule(self.family.attention) for layer in self.layers]
        self.config = wrapped.model.config
        registers = int(getattr(self.config, "num_register_tokens", 0) or 0)
        self.prefix = self.family.extra_prefix + registers
        self.native_grid = tuple(int(s) for s in wrapped.grid)
        self.patch = int(wrapped.img_size[0]) // self.native_grid[0]

    def missing(self) -> str | None:
        if self.family.rope is None:
            return None
        for a in self.attns:
            if not all(isinstance(getattr(a, n, None), nn.Module) for n in ("q_proj", "k_proj", "v_proj", "o_proj")):
                return f"a layer's attention ({type(a).__name__}) has no q_proj, k_proj, v_proj, o_proj to watch"
        return None

    def grids(self) -> list[tuple[int, int]]:
        takes_other = self.family.rope is not None or "input.grid" in self.wrapped.hook_points.points
        return other_grids(self.native_grid) if takes_other else [self.native_grid]

    def scale(self, layer: int) -> float:
        return float(self.attns[layer].scaling)

    def rotary_cos_sin(self, seen: Pass, layer: int) -> tuple[Tensor, Tensor] | None:
        got = seen.tables.get("rope")  # transformers' rotary module returns (cos, sin), one for every layer
        return None if got is None else (got[0].double(), got[1].double())

    def rotary_dtype(self, seen: Pass) -> torch.dtype | None:
        return None if seen.tables.get("rope") is None else seen.tables["rope"][0].dtype

    def declared_rope(self, grid: tuple[int, int]) -> RotaryReference | str | None:
        from peanchor.audit.reference import hf_dinov3_reference

        return hf_dinov3_reference(self.config, grid) if self.family.rope is not None else None

    @property
    def resample(self) -> tuple[str, bool]:
        """How the table is resampled off the native grid, as the family's code says."""
        return "bicubic", self.family.name == "dinov2_with_registers"

    def reference_embedding(self, patches: Tensor, grid: tuple[int, int], resample: tuple | None = None) -> Tensor:
        """The family's embeddings as declared: CLS (and DeiT's distillation token) first, the learned table
        added (resampled by bicubic ``F.interpolate`` off the native grid, antialiased for DINOv2 with registers,
        whose code says so), then DINOv2's registers after CLS with no table row; DINOv3: CLS, registers, patches."""
        from peanchor.audit.reference import resample_table

        e, name, b = self.backbone.embeddings, self.family.name, patches.shape[0]
        if name == "dinov3":
            return torch.cat([e.cls_token.expand(b, -1, -1), e.register_tokens.expand(b, -1, -1), patches], dim=1)
        if name in ("clip", "siglip"):
            table = e.position_embedding.weight[None]  # (1, P + N, D)
            cls = [e.class_embedding.expand(b, 1, -1)] if name == "clip" else []
        else:
            table = e.position_embeddings
            cls = [e.cls_token.expand(b, -1, -1)] + ([e.distillation_token.expand(b, -1, -1)] if name == "deit" else [])
        rows = len(cls)
        own = resample_table(table[:, rows:], self.native_grid, grid, *(resample or self.resample))
        x = torch.cat(cls + [patches], dim=1) + torch.cat([table[:, :rows], own.to(table.dtype)], dim=1)
        if name == "dinov2_with_registers":
            x = torch.cat([x[:, :1], e.register_tokens.expand(b, -1, -1), x[:, 1:]], dim=1)
        return x

    def _logits(self, images: Tensor, grid: tuple[int, int]) -> Tensor:
        other = self.family.interpolate_kwarg and grid != self.native_grid
        kwargs = {"interpolate_pos_encoding": True} if other else {}
        out = self.wrapped.model(pixel_values=images, **kwargs)
        return out.logits if self.wrapped.has_head else out.pooler_output

    @property
    def module(self) -> nn.Module:
        return self.wrapped.model

    def tables(self) -> list[Tensor]:
        """The learned table parameter, which removing the PE zeroes."""
        if self.family.table is None:
            return []
        owner, key = self.family.table
        return [getattr(self.backbone.get_submodule(owner), key)]

    def run(self, images: Tensor, *, eager: bool, reference: Callable | None = None, same: bool = False,
            perm: Tensor | None = None, remove: bool = False, stop: bool = False) -> Pass:  # fmt: skip
        """As :meth:`TimmObserver.run`; ``remove`` hands every layer DINOv3's rotary table of no rotation."""
        seen = Pass()
        grid = (images.shape[-2] // self.patch, images.shape[-1] // self.patch)
        handles: list[Any] = []
        patch_module = self.backbone.get_submodule(self.family.patch)

        def on_patches(_m: nn.Module, _a: Any, out: Any) -> Any:
            out = as_tensor(out)
            out = permute_patches(out, perm, channels_first=True)
            seen.tables["patches"] = out.flatten(2).transpose(1, 2) if out.dim() == 4 else out  # (B, N, D)
            return out

        def on_embeddings(_m: nn.Module, _a: Any, out: Any) -> Any:
            x = as_tensor(out)
            if reference is not None:
                x = self.reference_embedding(seen.tables["patches"], grid).to(x.dtype)
                out = x
            seen.tokens.append(x)
            if stop:
                raise _Stop
            return out

        def leave(_m: nn.Module, _a: Any, out: Any) -> None:
            seen.tokens.append(as_tensor(out))

        handles.append(patch_module.register_forward_hook(on_patches))
        handles.append(self.backbone.embeddings.register_forward_hook(on_embeddings))
        for layer in self.layers:
            handles.append(layer.register_forward_hook(leave))
        if self.family.rope is not None:
            rope = self.backbone.get_submodule(self.family.rope)
            if remove:
                handles.append(rope.register_forward_hook(
                    lambda _m, _a, out: (torch.ones_like(out[0]), torch.zeros_like(out[1]))))  # (cos, sin): no turn
            handles.append(rope.register_forward_hook(lambda _m, _a, out: seen.tables.__setitem__("rope", out)))
        if self.family.rope is not None or self.family.bias:  # the attention weights the PE enters (BEiT: its bias)
            for i, attn in enumerate(self.attns):
                handles += self._attention_hooks(attn, i, seen, reference)
        if same:
            handles += same_token_hooks(self.attns, "hidden_states")
        before = self.config._attn_implementation
        try:
            if eager or reference is not None:
                self.wrapped.model.set_attn_implementation("eager")
            with hooks(handles), zeroed(self.tables() + self.bias_tables() if remove else []):
                try:
                    seen.logits = self._logits(images, grid)
                except _Stop:
                    pass
                except Exception as e:  # noqa: BLE001  (the model's code failed on the probe: a finding)
                    seen.error = e
        finally:
            self.wrapped.model.set_attn_implementation(before)
        return seen

    def _attention_hooks(self, attn: nn.Module, layer: int, seen: Pass, reference: Callable | None) -> list[Any]:
        heads, hd = int(getattr(attn, "num_heads", 0) or self.config.num_attention_heads), int(attn.head_dim)

        def proj(store: dict) -> Callable:
            def hook(_m: nn.Module, _a: Any, out: Tensor) -> None:
                store[layer] = out.view(out.shape[0], out.shape[1], heads, hd).transpose(1, 2)  # (B, H, T, hd)

            return hook

        def done(_m: nn.Module, _a: Any, out: Any) -> Any:
            if reference is None:
                if isinstance(out, tuple) and len(out) > 1 and out[1] is not None:
                    seen.probs[layer] = out[1]
                return None
            v = seen.v[layer]
            probs = reference(seen, layer).to(v.dtype)  # (B, H, T, T)
            merged = (probs @ v).transpose(1, 2).reshape(v.shape[0], v.shape[2], heads * hd)  # (B, T, D)
            seen.probs[layer] = probs
            return (attn.o_proj(merged), probs)

        return [attn.q_proj.register_forward_hook(proj(seen.q)), attn.k_proj.register_forward_hook(proj(seen.k)),
                attn.v_proj.register_forward_hook(proj(seen.v)), attn.register_forward_hook(done)]  # fmt: skip
