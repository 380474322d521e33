"""The audit's observer of a timm NaFlexViT (:mod:`peanchor.adapters.timm_naflex`): timm's ViT observer
(:class:`~peanchor.audit.observe.TimmObserver`: hooks on the blocks, their attention's q/k norms and dropout) with
NaFlex's embedding: the patch tokens are taken at ``embeds.norm`` (before NaFlex adds its table in place), and the
reference embedding is built by peanchor from what the model declares: its table (learned ``(1, h, w, D)``, or the
factorized row + column sum), resized off the table's own grid by ``F.interpolate`` in float64 with the declared
mode, antialias, align_corners and aspect-ratio rule, added to the patch tokens only; then CLS and the registers in
front, then ``norm_pre``.

Imports: torch; :mod:`peanchor.audit` (observe).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from peanchor.audit.observe import Pass, TimmObserver, zeroed

__all__ = ["NaFlexObserver", "declared_resample", "reference_table", "table_grid"]


def table_grid(model: Any) -> tuple[int, int] | None:
    """The grid of a NaFlexViT's own table (None: it has none)."""
    e = model.embeds
    if e.pos_embed_type == "learned":
        return int(e.pos_embed.shape[1]), int(e.pos_embed.shape[2])
    if e.pos_embed_type == "factorized":
        return int(e.pos_embed_y.shape[1]), int(e.pos_embed_x.shape[1])
    return None


def declared_resample(embeds: Any) -> tuple[str, bool]:
    """How NaFlex says it resizes its table: the learned one by its ``pos_embed_interp_mode`` and
    ``pos_embed_antialias``; the factorized one by linear interpolation per axis without antialias, which is
    bilinear without antialias on the row + column sum."""
    if embeds.pos_embed_type == "factorized":
        return "bilinear", False
    return str(embeds.pos_embed_interp_mode), bool(embeds.pos_embed_antialias)


def reference_table(embeds: Any, grid: tuple[int, int], mode: str, antialias: bool) -> Tensor:
    """The declared table at ``grid``, ``(1, N, D)`` float64, row-major. An aspect-preserving model resizes to the
    longer side squared and keeps the top-left ``grid``. The learned table is resized by 2-D ``F.interpolate`` unless
    ``grid`` is its own; the factorized one, at the declared bilinear, axis by axis (1-D linear, each axis left as
    it is where its length is its own) and summed; at another mode (a suspect) as its row + column sum in 2-D."""
    side = max(grid)
    size = (side, side) if embeds.pos_embed_ar_preserving else tuple(grid)
    if embeds.pos_embed_type == "factorized" and (mode, antialias) == ("bilinear", False):
        axes = [_linear(t.double(), n) for t, n in zip((embeds.pos_embed_y, embeds.pos_embed_x), size)]
        rows, cols = axes[0][:, : grid[0]], axes[1][:, : grid[1]]  # (1, rows, D), (1, cols, D)
        return (rows[:, :, None] + cols[:, None]).reshape(1, grid[0] * grid[1], -1)
    if embeds.pos_embed_type == "learned":
        native = embeds.pos_embed.double()  # (1, h, w, D)
    else:
        native = embeds.pos_embed_y.double()[:, :, None] + embeds.pos_embed_x.double()[:, None]  # (1, h, w, D)
    if tuple(native.shape[1:3]) != tuple(grid):
        kwargs: dict[str, Any] = {}
        if mode in ("bilinear", "bicubic"):
            kwargs = {"align_corners": bool(embeds.pos_embed_align_corners), "antialias": antialias}
        image = F.interpolate(native.permute(0, 3, 1, 2), size=size, mode=mode, **kwargs)  # (1, D, rows, cols)
        native = image[:, :, : grid[0], : grid[1]].permute(0, 2, 3, 1)  # (1, rows, cols, D)
    return native.reshape(1, grid[0] * grid[1], -1)


def _linear(table: Tensor, length: int) -> Tensor:
    """A ``(1, L, D)`` axis table at ``length`` entries by 1-D linear interpolation (itself at its own length)."""
    if table.shape[1] == length:
        return table
    return F.interpolate(table.transpose(1, 2), size=length, mode="linear", align_corners=False).transpose(1, 2)


class _PatchSite:
    """What :class:`TimmObserver` hooks as ``patch_embed``: NaFlex's ``embeds.norm`` (the patch tokens, before the
    table), with the tokens handed on as a copy so that NaFlex's in-place ``add_`` leaves the recorded ones alone."""

    def __init__(self, norm: nn.Module, patch: tuple[int, int]) -> None:
        self.norm = norm
        self.patch_size = patch

    def register_forward_hook(self, fn: Any) -> Any:
        return self.norm.register_forward_hook(lambda m, a, out: fn(m, a, out).clone())


class _Seen:
    """The NaFlexViT as :meth:`TimmObserver.run` reads it: every attribute the model's own, ``patch_embed`` the
    patch site, and calling it the model's own forward."""

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self.patch_embed = _PatchSite(model.embeds.norm, tuple(model.embeds.patch_size))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._model, name)

    def __call__(self, images: Tensor) -> Tensor:
        return self._model(images)


class NaFlexObserver(TimmObserver):
    """Watches a NaFlexViT (``wrapped.model``) through hooks on its own modules; it takes images of any grid."""

    def __init__(self, wrapped: Any) -> None:
        self.inner = wrapped.model
        self.blocks = list(self.inner.blocks)
        self.attns = [getattr(b, "attn", None) for b in self.blocks]
        self.prefix = int(self.inner.num_prefix_tokens)
        self.rope = None
        self.native_grid = table_grid(self.inner) or tuple(wrapped.grid)
        self.dynamic = True  # a dense batch of any whole number of patches: NaFlex resizes its table itself
        self.resample = declared_resample(self.inner.embeds)

    @property
    def patch(self) -> int:
        return int(self.inner.embeds.patch_size[0])

    def grids(self) -> list[tuple[int, int]]:
        """Its own grid, a non-square wider one, one of equal slots and another shape, and one fewer row (where
        antialiasing matters)."""
        grids = super().grids()
        rows, cols = self.native_grid
        return grids + ([(rows - 1, cols)] if rows > 2 else [])

    def tables(self) -> list[Tensor]:
        """The table as the checks read it, ``(1, N, D)`` (no prefix rows): the learned table as a view (zeroing it
        zeroes the parameter), the factorized one as its row + column sum (a copy: :meth:`run` zeroes its two
        parameters itself)."""
        e = self.inner.embeds
        if e.pos_embed_type == "learned":
            return [e.pos_embed.view(1, -1, e.pos_embed.shape[-1])]
        if e.pos_embed_type == "factorized":
            with torch.no_grad():
                return [(e.pos_embed_y[:, :, None] + e.pos_embed_x[:, None]).flatten(1, 2)]
        return []

    def reference_embedding(self, patches: Tensor, grid: tuple[int, int], resample: tuple | None = None) -> Tensor:
        e, b = self.inner.embeds, patches.shape[0]
        x = patches
        if e.pos_embed_type != "none":
            mode, antialias = resample or self.resample
            x = x + reference_table(e, grid, mode, antialias).to(patches.dtype)  # (B, N, D)
        prefix = [t.expand(b, -1, -1) for t in (e.cls_token, e.reg_token) if t is not None]  # CLS, then registers
        x = torch.cat(prefix + [x], dim=1) if prefix else x
        return self.inner.norm_pre(x)

    def run(self, images: Tensor, **kwargs: Any) -> Pass:
        """:meth:`TimmObserver.run` on the model seen through :class:`_Seen` (its patch site is ``embeds.norm``);
        ``remove`` also zeroes the factorized row and column tables."""
        model, e = self.inner, self.inner.embeds
        rows_cols = [e.pos_embed_y, e.pos_embed_x] if kwargs.get("remove") and e.pos_embed_type == "factorized" else []
        self.inner = _Seen(model)
        try:
            with zeroed(rows_cols):
                return super().run(images, **kwargs)
        finally:
            self.inner = model

    @property
    def module(self) -> nn.Module:
        return self.inner._model if isinstance(self.inner, _Seen) else self.inner
