"""Edits and the hook points they act at: what a model names, the values those points carry, one pass's edits.

Every backend (peanchor's ViT, the timm and the transformers adapters) implements the same named hook points once,
and says which it has (:class:`HookPoints`, ``model.hook_points``); an edit names the points it needs and acts on
their values, never on a model:

=========================== ============================================================ ====================
hook point                  value                                                        edits
=========================== ============================================================ ====================
``pe.table``                the absolute code added to the tokens: :class:`PETable`      pe_zero, pe_shuffle,
                            (prefix rows, patch rows on the grid), α already applied     pe_resample
``rope.tables``             the rotary tables: :class:`RopeTables` (cos, sin per layer,  rope_planes
                            head, slot and channel; the rotation planes)
``pe.bias``                 a PE's attention bias ``(L|1, H, T, T)`` (ALiBi), α applied  pe_zero
``pe.rotation``             a PE's general rotation of q and k (LieRE, ComRoPE, STRING:  pe_zero
                            :class:`peanchor.pe.base.BlockRotation`), α applied
``input.grid``              the model takes images of another patch grid                 pe_resample
``blocks.{k}.attn.heads``   block k's per-head attention output before its projection,   head_ablate
                            ``(B, T, H, hd)``
``blocks.{k}.attn``         block k's attention branch (after the projection, before the patch
                            residual add), ``(B, T, D)``
``blocks.{k}.mlp``          block k's MLP branch, ``(B, T, D)``                          patch
``blocks.{k}.residual``     the residual stream leaving block k (what block k+1 reads),  patch
                            ``(B, T, D)``
=========================== ============================================================ ====================

``T`` counts the prefix tokens (CLS, registers) first, then the patch slots in row-major order. A pass without
edits never reaches a hook point, so it is today's pass exactly. Definitions: docs/interventions.md.

Imports: torch; :mod:`peanchor.interventions` (spec).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import torch
from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.spec import INDEX_RULE, IndexSet, index_set, param, show_index_set

__all__ = [
    "BLOCK_SITES", "Edit", "EditPass", "HookPoints", "LayersAndHeads", "PETable", "Plane", "RopeTables", "axial_planes", "check_grid",
    "check_indices",
]  # fmt: skip

#: The hook points inside each block, as ``blocks.{k}.<site>`` names them.
BLOCK_SITES = ("attn.heads", "attn", "mlp", "residual")
#: Every hook-point family, in the order messages list them.
POINTS = ("pe.table", "rope.tables", "pe.bias", "pe.rotation", "input.grid") + tuple(f"blocks.{{k}}.{s}" for s in BLOCK_SITES)


@dataclass(frozen=True)
class Plane:
    """One rotation plane of a rotary table: the two channels it rotates, its axis (None: a mixed-axis plane)
    and its frequency index on that axis (0 = the fastest-turning plane of the axis)."""

    axis: str | None  # "x" (columns), "y" (rows) or None
    freq: int
    channels: tuple[int, int]


@dataclass(frozen=True)
class HookPoints:
    """What a model offers edits: its hook-point families (:data:`POINTS`) and the sizes an edit is checked
    against."""

    model: str  # how messages name the model, e.g. "peanchor:rope" or "timm:ape"
    points: frozenset[str]
    depth: int
    num_heads: int
    grid: tuple[int, int]
    num_prefix: int
    planes: tuple[Plane, ...] = ()  # the rotation planes (models with rope.tables)

    def require(self, point: str, kind: str) -> None:
        """One line when this model lacks ``point``, naming what it has."""
        if point not in self.points:
            have = ", ".join(p for p in POINTS if p in self.points) or "none"
            raise ConfigError(f"{kind} acts at {point}, which {self.model} does not have; it has: {have}")


@dataclass(frozen=True)
class PETable:
    """The absolute code a pass adds to its tokens, α applied: ``prefix`` rows ``(1, p, D)`` for the first ``p``
    prefix tokens (None: the table has none, e.g. timm's ``no_embed_class`` or our sin-cos), ``patches``
    ``(1, N, D)`` for the slots of ``grid`` in row-major order."""

    prefix: Tensor | None
    patches: Tensor
    grid: tuple[int, int]

    def added_to(self, x: Tensor) -> Tensor:
        """``x`` ``(B, P + N, D)`` with this table added: the prefix rows to the first of the P prefix tokens."""
        p = x.shape[1] - self.patches.shape[1]
        parts = [x[:, :p], x[:, p:] + self.patches]
        if self.prefix is not None:
            k = self.prefix.shape[1]
            parts[:1] = [x[:, :k] + self.prefix, x[:, k:p]]
        return torch.cat(parts, dim=1)  # (B, P + N, D)


@dataclass(frozen=True)
class RopeTables:
    """A pass's rotary tables: ``cos``, ``sin`` ``(L|1, H|1, N, C)`` (layer, head, slot, channel) and the planes
    the channels form. A model converts its own layout to this and back."""

    cos: Tensor
    sin: Tensor
    planes: tuple[Plane, ...]


def axial_planes(
    cos: Tensor, sin: Tensor, grid: tuple[int, int], pairs: list[tuple[int, int]], speeds: list[float]
) -> tuple[Plane, ...]:
    """The planes of an axial rotary table ``cos``, ``sin`` ``(N, C)`` whose channel ``pairs`` rotate together at
    ``speeds`` (one per pair, any common unit): each plane's axis is read off the table (an ``x`` plane's angle does
    not change down a column), and its frequency index ranks it among its axis's planes, fastest first."""
    angles = torch.atan2(sin, cos).reshape(grid[0], grid[1], -1)  # (rows, cols, C)
    axes = ["x" if (angles[:, :, a] - angles[:, :1, a]).abs().max() > 0 else "y" for a, _ in pairs]
    planes: list[Plane] = []
    for axis in ("x", "y"):
        mine = sorted((i for i in range(len(pairs)) if axes[i] == axis), key=lambda i: -speeds[i])
        planes += [Plane(axis, rank, pairs[i]) for rank, i in enumerate(mine)]
    return tuple(planes)


def check_grid(images: Tensor, grid: tuple[int, int], patch: int | tuple[int, int]) -> None:
    """One line when ``images (B, 3, H, W)`` do not give the patch ``grid`` a pass expects (``patch`` px patches)."""
    ph, pw = (int(patch[0]), int(patch[1])) if isinstance(patch, (tuple, list)) else (int(patch), int(patch))
    have = (images.shape[-2] // ph, images.shape[-1] // pw)
    if have != tuple(grid) or images.shape[-2] % ph or images.shape[-1] % pw:
        raise ConfigError(f"images of {images.shape[-2]}x{images.shape[-1]} px give a {have[0]}x{have[1]} patch grid; "
                          f"this pass expects {grid[0]}x{grid[1]} ({grid[0] * ph}x{grid[1] * pw} px)")  # fmt: skip


def check_indices(kind: str, key: str, value: IndexSet, size: int, what: str) -> None:
    """One line when an index of ``value`` is outside ``0..size-1``."""
    if value is not None and value and max(value) >= size:
        raise ConfigError(f"{kind}:{key}={show_index_set(value)}: the model has {size} {what} (0-{size - 1})")


class Edit:
    """Base class of the edit kinds: a frozen dataclass whose fields are its spec parameters.

    A kind sets ``kind`` (its spec name), ``summary`` (one line), ``points`` (the hook-point families it acts at)
    and overrides the hooks it needs: :meth:`on_table`, :meth:`on_rope`, :meth:`on_block` (for the block sites it
    lists in :meth:`block_sites`) and :meth:`pass_grid` (the patch grid of the images it expects).
    """

    kind: ClassVar[str]
    summary: ClassVar[str]
    points: ClassVar[tuple[str, ...]] = ()

    def check(self, hooks: HookPoints) -> None:
        """Raise one ConfigError line when this edit cannot act on the model ``hooks`` describes."""
        for point in self.required_points(hooks):
            hooks.require(point, self.kind)

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        return self.points

    def block_sites(self, hooks: HookPoints) -> frozenset[tuple[str, int]]:
        """The ``(site, layer)`` pairs this edit acts at."""
        return frozenset()

    def pass_grid(self, hooks: HookPoints) -> tuple[int, int] | None:
        return None

    def first_layer(self, hooks: HookPoints) -> int:
        """The first block this edit changes: the blocks before it compute what they compute without it, so a
        pass can start there from the residual of a pass without it (``Start``; ``hooks.depth``: it changes no
        block). 0 for an edit of the input or of every block's tables, the default."""
        return 0

    def rope_coordinates(self, hooks: HookPoints) -> tuple[Tensor, Tensor] | None:
        return None

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        return table

    def on_rope(self, tables: RopeTables, hooks: HookPoints) -> RopeTables:
        return tables

    def on_bias(self, bias: Tensor | None, hooks: HookPoints) -> Tensor | None:
        """The PE's attention bias ``(L|1, H, T, T)`` (None: no bias) at ``pe.bias``."""
        return bias

    def on_rotation(self, rotation: Any, hooks: HookPoints) -> Any:
        """The PE's general rotation at ``pe.rotation`` (a backend's own value; None: no rotation)."""
        return rotation

    def on_block(self, site: str, layer: int, x: Tensor, run: EditPass) -> Tensor:
        return x

    # ---- what an edit needs before its pass: a fit over images, activations of a donor pass -----------------
    #: Whether the edit is left out of a donor pass (an edit that reads donors, or records a pass's sites).
    donor_pass_excludes: ClassVar[bool] = False

    def needs_fit(self) -> bool:
        """Whether :meth:`fit` must run before this edit can act (e.g. a mean ablation without its means)."""
        return False

    def fit(self, model: Any, batches: Iterable[Tensor]) -> Edit:
        """This edit made ready from ``batches`` of normalised images under the model's plain pass (a copy; the
        default: the edit as it is)."""
        return self

    def donor_key(self) -> Any:
        """The donor pass this edit reads activations from (edits with the same key share one pass), or None."""
        return None

    def donor_sites(self) -> frozenset[tuple[str, int]]:
        """The ``(site, layer)`` activations it reads from its donor pass."""
        return frozenset()

    def donor_perm(self, receiving: Tensor | None, n: int, device: Any) -> Tensor | None:
        """The token order of its donor pass, given the receiving pass's ``receiving`` (None: tokens in order)."""
        return None

    @property
    def spec(self) -> str:
        """The spec text this edit reads back from (every parameter written out)."""
        parts = []
        for f in fields(self):  # type: ignore[arg-type]
            if "reader" in f.metadata:
                value = getattr(self, f.name)
                text = show_index_set(value) if f.metadata["reader"].__name__ == "index_set" else _show(value)
                parts.append(f"{f.name}={text}")
        return self.kind + (":" + ",".join(parts) if parts else "")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, int) for v in value):
        return f"{value[0]}x{value[1]}"
    return str(value)


@dataclass(frozen=True)
class LayersAndHeads(Edit):
    """The base of a kind that acts in chosen blocks and heads: its ``layers=`` and ``heads=`` and their checks."""

    layers: IndexSet = param(index_set, f"the blocks ({INDEX_RULE})", None)
    heads: IndexSet = param(index_set, f"the heads ({INDEX_RULE})", None)

    def check(self, hooks: HookPoints) -> None:
        super().check(hooks)
        check_indices(self.kind, "layers", self.layers, hooks.depth, "blocks")
        check_indices(self.kind, "heads", self.heads, hooks.num_heads, "heads")

    def first_layer(self, hooks: HookPoints) -> int:
        """The first of ``layers`` (0 for every block; ``hooks.depth`` for none)."""
        if self.layers is None:
            return 0
        return min(self.layers, default=hooks.depth)


class EditPass:
    """The edits of one pass, bound to the model's hook points and to the donor activations ``patch`` reads.

    A backend asks :meth:`acts_at` before it builds a hook point's value, so that a pass whose edits do not touch a
    point computes it exactly as the plain pass does.
    """

    def __init__(self, edits: Iterable[Edit], hooks: HookPoints, donors: Mapping[Any, Tensor] | None = None):
        self.edits = tuple(edits)
        self.hooks = hooks
        self.donors = dict(donors or {})
        self._sites = [(e, e.block_sites(hooks)) for e in self.edits]
        self._points = {p for e in self.edits for p in e.required_points(hooks)}
        grids = {g for e in self.edits if (g := e.pass_grid(hooks)) is not None}
        if len(grids) > 1:
            raise ConfigError(f"edits ask for different patch grids: {', '.join(f'{r}x{c}' for r, c in sorted(grids))}")
        self.grid = grids.pop() if grids else hooks.grid

    def acts_at(self, point: str) -> bool:
        return point in self._points

    def acts_on_block(self, site: str, layer: int) -> bool:
        return any((site, layer) in s for _, s in self._sites)

    def at_layer(self, layer: int) -> Callable[[str, Tensor], Tensor] | None:
        """``site(name, x)`` for block ``layer``'s inner sites, or None when no edit acts inside that block."""
        if not any(s == layer for _, sites in self._sites for name, s in sites if name != "residual"):
            return None
        return lambda name, x: self.block(name, layer, x)

    def heads_pre_hook(self, layer: int, num_heads: int) -> Callable[[Any, tuple[Tensor, ...]], tuple[Tensor, ...]]:
        """A forward pre-hook for the module that receives block ``layer``'s merged heads ``(B, T, D)`` (an output
        projection): ``blocks.{layer}.attn.heads`` acts on them viewed ``(B, T, H, hd)``."""

        def hook(_module: Any, args: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
            b, t, d = args[0].shape
            heads = self.block("attn.heads", layer, args[0].reshape(b, t, num_heads, d // num_heads))  # (B, T, H, hd)
            return (heads.reshape(b, t, d), *args[1:])

        return hook

    def output_hook(self, site: str, layer: int) -> Callable[[Any, Any, Any], Any]:
        """A forward hook for the module whose output is ``blocks.{layer}.{site}`` (of a tuple: its first item)."""

        def hook(_module: Any, _inputs: Any, out: Any) -> Any:
            if isinstance(out, tuple):  # e.g. transformers' attention modules: (output, weights)
                return (self.block(site, layer, out[0]), *out[1:])
            return self.block(site, layer, out)

        return hook

    def positions(self) -> tuple[Tensor, Tensor] | None:
        """The (row, column) coordinates ``(N,)`` each at which a rotary table is built (None: the model's own)."""
        for e in self.edits:
            pos = e.rope_coordinates(self.hooks)
            if pos is not None:
                return pos
        return None

    def table(self, table: PETable) -> PETable:
        for e in self.edits:
            table = e.on_table(table, self.hooks)
        return table

    def rope(self, tables: RopeTables) -> RopeTables:
        for e in self.edits:
            tables = e.on_rope(tables, self.hooks)
        return tables

    def bias(self, bias: Tensor | None) -> Tensor | None:
        for e in self.edits:
            bias = e.on_bias(bias, self.hooks)
        return bias

    def rotation(self, rotation: Any) -> Any:
        for e in self.edits:
            rotation = e.on_rotation(rotation, self.hooks)
        return rotation

    def block(self, site: str, layer: int, x: Tensor) -> Tensor:
        for e, sites in self._sites:
            if (site, layer) in sites:
                x = e.on_block(site, layer, x, self)
        return x

