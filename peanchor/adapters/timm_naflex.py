"""The timm NaFlexViT backend: ``timm.models.naflexvit.NaFlexVit`` behind the analysis interface, through timm's own
modules, on the timm pass (:class:`~peanchor.adapters.timm_pass.TimmPass`).

Fixed-grid input only: a dense image batch of one size (timm's "standard 2D mode"); NaFlex's packed batches of
variable-size patch sequences (``patch_coord``/``patch_valid``) are not analysed. NaFlex's PE is a learned table of
its own grid (``embeds.pos_embed`` ``(1, h, w, D)``), a factorized one (``embeds.pos_embed_y`` ``(1, h, D)`` plus
``embeds.pos_embed_x`` ``(1, w, D)``) or none (``embeds.pos_embed_type``). It is given to the patch tokens only,
never to CLS or the registers, and resized by NaFlex's own code to the grid of the images: the learned table by
``F.interpolate`` with the declared ``pos_embed_interp_mode`` and ``pos_embed_antialias``, the factorized one by
1-D linear interpolation per axis. The pass is timm's ``forward_features`` step by step:

* the patch tokens are what ``embeds`` makes before its table is added (timm's own patchify / projection / norm);
* the table is NaFlex's own resize (its ``_apply_*_pos_embed`` on zeros) at the model's grid, α × it is added
  (``pe.table``: the factorized sum, zeroed by ``pe_zero`` as zeroed row and column tables are);
* RPI moves the patch content before the table is added; the table stays on its slots;
* ``input.grid`` (``pe_resample``) runs the patches at another grid with the table edited there.

The model's grid is the table's own (``pos_embed_grid_size``) unless ``wrap(..., img_size=...)`` says otherwise.
Rotary NaFlex models (``rope_type``) and EVA blocks are refused with the classes this backend wraps.

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (backend, timm_audit, timm_load, timm_naflex_observe,
timm_pass), :mod:`peanchor.interventions`, :mod:`peanchor.audit` (the claim).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.adapters.timm_audit import timm_subject
from peanchor.adapters.timm_load import describe, require_timm
from peanchor.adapters.timm_naflex_observe import NaFlexObserver, declared_resample, table_grid
from peanchor.adapters.timm_pass import TimmPass
from peanchor.core.errors import ConfigError
from peanchor.interventions import PETable
from peanchor.interventions.edit import check_grid

__all__ = ["TimmNaFlex", "TimmNaFlexBackend"]


class _Stop(Exception):
    """Ends timm's embedding once the patch tokens are taken (before its table is added)."""


class TimmNaFlex(TimmPass):
    """A timm NaFlexViT behind peanchor's analysis interface, on a fixed grid; ``self.model`` is unchanged."""

    families = ("naflex",)

    def __init__(self, model: nn.Module, *, grid: tuple[int, int], model_args: dict[str, Any] | None = None):
        if getattr(model, "rope", None) is not None:
            raise ConfigError("a rotary NaFlexViT (rope_type) is not supported; peanchor wraps NaFlexViT with a "
                              "learned, factorized or no position table")  # fmt: skip
        super().__init__(model, model_args=model_args)
        self._grid = (int(grid[0]), int(grid[1]))

    @property
    def grid(self) -> tuple[int, int]:
        return self._grid

    @property
    def img_size(self) -> tuple[int, int]:
        patch = self.model.embeds.patch_size
        return self._grid[0] * int(patch[0]), self._grid[1] * int(patch[1])

    @property
    def has_table(self) -> bool:
        return self.model.embeds.pos_embed_type != "none"

    def _embed_patches(self, images: Tensor, grid: tuple[int, int]) -> Tensor:
        """The patch tokens timm's ``embeds`` makes (its patchify, projection and norm), before any table."""
        embeds = self.model.embeds
        check_grid(images, grid, embeds.patch_size)
        taken: list[Tensor] = []

        def take(_m: nn.Module, _a: Any, out: Tensor) -> None:
            taken.append(out.clone())  # timm adds its table to this tensor in place next
            raise _Stop

        handle = embeds.norm.register_forward_hook(take)
        try:
            embeds(images)
        except _Stop:
            pass
        finally:
            handle.remove()
        return taken[0]  # (B, N, D), row-major slots

    def _prefix_tokens(self, batch: int) -> list[Tensor]:
        embeds = self.model.embeds  # CLS and the registers, which NaFlex gives no table row
        return [t.expand(batch, -1, -1) for t in (embeds.cls_token, embeds.reg_token) if t is not None]

    def _table(self, alpha: float, grid: tuple[int, int], like: Tensor) -> PETable | None:
        """NaFlex's own table at ``grid`` × α, ``(1, N, D)``: its resize applied to zeros (timm adds it in place)."""
        embeds = self.model.embeds
        if not self.has_table:
            return None
        table = torch.zeros(1, grid[0] * grid[1], like.shape[-1], dtype=like.dtype, device=like.device)
        if embeds.pos_embed_type == "learned":
            embeds._apply_learned_pos_embed(table, grid_size=list(grid))
        else:
            embeds._apply_factorized_pos_embed(table, grid_size=list(grid))
        return PETable(None, table if alpha == 1.0 else table * alpha, grid)

    def _after_table(self, x: Tensor, grid: tuple[int, int], has_table: bool) -> Tensor:
        """NaFlex's dropout after the table and ``norm_pre`` (patch dropout refused: it removes tokens)."""
        m = self.model
        x = m.embeds.pos_drop(x)
        if self.training and m.patch_drop is not None:
            raise ValueError("patch dropout removes tokens (training mode): call .eval() before the analysis")
        return m.norm_pre(x)


def _grid_for(model: Any, img_size: Any) -> tuple[int, int]:
    """The grid a NaFlexViT is analysed at: ``img_size`` (int or (rows, cols) pixels) over the patch, else its
    table's own grid (``pos_embed_grid_size``, kept without a table too), else its pretrained input size."""
    patch = tuple(int(p) for p in model.embeds.patch_size)
    if img_size is None:
        own = table_grid(model) or model.embeds.pos_embed_grid_size
        if own is not None:
            return int(own[0]), int(own[1])
        img_size = (getattr(model, "pretrained_cfg", None) or {}).get("input_size", (3, 224, 224))[1:]
    rows, cols = (img_size, img_size) if isinstance(img_size, int) else tuple(img_size)
    if rows % patch[0] or cols % patch[1]:
        raise ConfigError(f"img_size {rows}x{cols} is not a whole number of {patch[0]}x{patch[1]} patches")
    return rows // patch[0], cols // patch[1]


@BACKENDS.register
class TimmNaFlexBackend(Backend):
    """timm's NaFlexViT (``timm.models.naflexvit.NaFlexVit``), on dense fixed-grid batches."""

    name = "timm_naflex"
    summary = "a timm NaFlexViT (learned, factorized or no table; fixed-grid batches)"

    def accepts(self, model: Any) -> bool:
        return type(model).__module__ == "timm.models.naflexvit"

    def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict[str, Any] | None = None) -> Any:
        args = dict(model_args or describe(model, require_timm().__version__))
        grid = _grid_for(model, img_size)
        patch = model.embeds.patch_size
        args["img_size"] = [grid[0] * int(patch[0]), grid[1] * int(patch[1])]
        return TimmNaFlex(model, grid=grid, model_args=args).train(model.training)

    def wraps(self, wrapped: Any) -> bool:
        return isinstance(wrapped, TimmNaFlex)

    def audit_subject(self, wrapped: Any) -> Any:
        """The claim read off NaFlex's own attributes (``embeds.pos_embed_type``, its interpolation mode and
        antialias, its prefix tokens), timm's own forward at other grids, and an observer of its own modules."""
        from peanchor.audit.subject import Claim

        inner, embeds = wrapped.model, wrapped.model.embeds
        kind = embeds.pos_embed_type
        mode, antialias = declared_resample(embeds)
        said = (f"timm NaFlexVit: pos_embed={kind} on {table_grid(inner)}, resized {mode} antialias={antialias}, "
                f"class_token={embeds.has_class_token}, reg_tokens={embeds.num_reg_tokens}")  # fmt: skip
        claim = Claim("none" if kind == "none" else "learned table", None, None if kind == "none" else 0,
                      int(inner.num_prefix_tokens), source=said)  # fmt: skip
        # Its own resize is pe_resample's where it starts from the model's grid and stretches the table (an
        # aspect-preserving NaFlex resizes to a square and crops: ``reference_parity`` reads that path instead).
        resizes = kind != "none" and table_grid(inner) == wrapped.grid and not embeds.pos_embed_ar_preserving
        own = (mode, antialias) if resizes else None
        return timm_subject(wrapped, claim, NaFlexObserver(wrapped), own_resample=own)

    def signature(self, wrapped: Any) -> str:
        embeds = wrapped.model.embeds
        return (f"NaFlexVit table={embeds.pos_embed_type} resize={declared_resample(embeds)} "
                f"ar_preserving={embeds.pos_embed_ar_preserving} align_corners={embeds.pos_embed_align_corners} "
                f"prefix={wrapped.num_prefix}")  # fmt: skip
