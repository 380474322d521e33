"""``Hook(point, fn)``: any Python function at one named hook point, on every backend (as TransformerLens's
``run_with_hooks`` runs a function at a named site).

::

    def double_the_mlp(x):                   # (B, T, D): block 3's MLP branch
        return 2 * x

    iv = Intervention().with_edits(Hook("blocks.3.mlp", double_the_mlp))
    out = model.forward_intermediates(images, iv)

``point`` is one hook point as docs/interventions.md names them: ``pe.table`` (``fn`` takes and returns a
:class:`PETable`), ``rope.tables`` (a :class:`RopeTables`), ``pe.bias`` (an attention bias tensor),
``pe.rotation`` (the PE's per-slot rotation, e.g. a :class:`~peanchor.pe.base.BlockRotation`), or
``blocks.{k}.<site>`` with ``site`` one of
``attn.heads`` ``(B, T, H, hd)``, ``attn``, ``mlp``, ``residual`` ``(B, T, D)`` (``fn`` takes and returns the
tensor). An identity ``fn`` gives the plain pass bit for bit; a point the model lacks is one line listing the
model's points. A hook is built in Python, not from spec text: it cannot be written as ``--intervention``, and its
record names the function.

Imports: torch; :mod:`peanchor.interventions` (edit).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import BLOCK_SITES, POINTS, Edit, EditPass, HookPoints, PETable, RopeTables

__all__ = ["Hook"]

_BLOCK = re.compile(r"blocks\.(\d+)\.(" + "|".join(re.escape(s) for s in BLOCK_SITES) + r")")


@dataclass(frozen=True, eq=False)
class Hook(Edit):
    """``fn`` applied to the value at hook point ``point`` (docs/interventions.md); see the module's docstring.

    >>> Hook("blocks.2.residual", lambda x: x).spec
    'hook:point=blocks.2.residual,fn=<lambda>'
    >>> Hook("blocks.2.nowhere", abs)
    Traceback (most recent call last):
    ...
    peanchor.core.errors.ConfigError: Hook point 'blocks.2.nowhere' is not a hook point; they are: pe.table, rope.tables, pe.bias, pe.rotation, input.grid, blocks.{k}.attn.heads, blocks.{k}.attn, blocks.{k}.mlp, blocks.{k}.residual
    """

    kind = "hook"
    summary = "any Python function at one hook point"

    point: str
    fn: Callable[[Any], Any] = field(repr=False)
    _site: tuple[str, int] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ConfigError(f"Hook({self.point!r}, ...): fn must be callable, got {type(self.fn).__name__}")
        block = _BLOCK.fullmatch(self.point)
        if block:
            object.__setattr__(self, "_site", (block.group(2), int(block.group(1))))
        elif self.point not in ("pe.table", "rope.tables", "pe.bias", "pe.rotation"):
            raise ConfigError(f"Hook point {self.point!r} is not a hook point; they are: {', '.join(POINTS)}")

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        return (f"blocks.{{k}}.{self._site[0]}",) if self._site else (self.point,)

    def check(self, hooks: HookPoints) -> None:
        super().check(hooks)
        if self._site and not 0 <= self._site[1] < hooks.depth:
            raise ConfigError(f"Hook point {self.point!r}: {hooks.model} has {hooks.depth} blocks "
                              f"(0-{hooks.depth - 1})")  # fmt: skip

    def block_sites(self, hooks: HookPoints) -> frozenset[tuple[str, int]]:
        return frozenset({self._site}) if self._site else frozenset()

    def first_layer(self, hooks: HookPoints) -> int:
        return self._site[1] if self._site else 0

    def on_table(self, table: PETable, hooks: HookPoints) -> PETable:
        return self._call(table, PETable) if self.point == "pe.table" else table

    def on_rope(self, tables: RopeTables, hooks: HookPoints) -> RopeTables:
        return self._call(tables, RopeTables) if self.point == "rope.tables" else tables

    def on_bias(self, bias: Tensor | None, hooks: HookPoints) -> Tensor | None:
        return self._call(bias, Tensor) if self.point == "pe.bias" and bias is not None else bias

    def on_rotation(self, rotation: Any, hooks: HookPoints) -> Any:
        if self.point != "pe.rotation" or rotation is None:
            return rotation
        return self._call(rotation, type(rotation))

    def on_block(self, site: str, layer: int, x: Tensor, run: EditPass) -> Tensor:
        return self._call(x, Tensor)

    def _call(self, value: Any, expected: type) -> Any:
        out = self.fn(value)
        if not isinstance(out, expected):
            raise ConfigError(f"Hook({self.point!r}, {self._name}) returned a {type(out).__name__}; expected a "
                              f"{expected.__name__}, as it was given")  # fmt: skip
        if isinstance(out, Tensor) and out.shape != value.shape:
            raise ConfigError(f"Hook({self.point!r}, {self._name}) returned shape {tuple(out.shape)}; expected "
                              f"{tuple(value.shape)}")  # fmt: skip
        return out

    @property
    def _name(self) -> str:
        return getattr(self.fn, "__qualname__", type(self.fn).__name__)

    @property
    def spec(self) -> str:
        """What records name it by: the point and the function (not spec text that parses back)."""
        return f"hook:point={self.point},fn={self._name}"
