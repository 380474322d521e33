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
model's points.

Its spec, and so its record in ``analysis.json``, names the function by where it is imported from,
``hook:point=blocks.3.mlp,fn=mylab.hooks:double_the_mlp``, and reads back: to a :class:`FunctionName`, which imports
the module only when the hook is checked against a model, before its first pass (never when a record is read). So
``--intervention hook:point=...,fn=MODULE:FUNCTION`` runs a researcher's own function from the command line, as
``--plugin`` loads their module. A lambda or a function defined inside another is recorded by its name too
(``__main__:<lambda>``), which reads back but cannot be imported: running it again is one line saying so.

Imports: torch; :mod:`peanchor.interventions` (edit, registry, spec).
"""

from __future__ import annotations

import importlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor

from peanchor.core.errors import ConfigError
from peanchor.interventions.edit import BLOCK_SITES, POINTS, Edit, EditPass, HookPoints, PETable, RopeTables
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.interventions.spec import param

__all__ = ["FunctionName", "Hook", "function_name"]


def function_name(fn: Any) -> str:
    """Where ``fn`` is imported from, ``module:qualified.name`` (a callable object: its class's)."""
    if isinstance(fn, FunctionName):
        return fn.name
    named = fn if hasattr(fn, "__qualname__") else type(fn)
    module, qualname = getattr(named, "__module__", None) or "?", named.__qualname__
    short = getattr(named, "__name__", None)
    if short and getattr(sys.modules.get(module), short, None) is named:  # e.g. torch.tanh, whose class is internal
        qualname = short
    return f"{module}:{qualname}"


@dataclass(frozen=True)
class FunctionName:
    """A hook's function known by its name, ``module:qualified.name``, as a spec or a record gives it. The module is
    imported at :meth:`load` (a hook's check, before its first pass), never when the name is read.

    >>> FunctionName("math:sqrt")(16.0)
    4.0
    >>> FunctionName("__main__:<lambda>").load()
    Traceback (most recent call last):
    ...
    peanchor.core.errors.ConfigError: hook function __main__:<lambda> cannot be imported by its name (a lambda, or a function defined inside another): run it from Python with Hook(point, fn)
    """

    name: str
    _loaded: list[Callable[[Any], Any]] = field(default_factory=list, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.name.strip() or self.name.strip().startswith(":") or self.name.strip().endswith(":"):
            raise ValueError(f"expected the function as MODULE:NAME (e.g. mylab.hooks:double), got {self.name!r}")

    @property
    def importable(self) -> bool:
        """Whether the name can be imported: it names its module (records written before hooks named theirs, as
        ``fn=double``, still read), and is not a lambda nor a function defined inside another."""
        return ":" in self.name and "<" not in self.name

    def load(self) -> Callable[[Any], Any]:
        """The function, imported once; one :class:`ConfigError` line when it cannot be."""
        if self._loaded:
            return self._loaded[0]
        module, colon, qualname = self.name.partition(":")
        if not colon:
            raise ConfigError(f"hook function {self.name!r} names no module: expected the function as MODULE:NAME "
                              "(e.g. mylab.hooks:double)")  # fmt: skip
        if not self.importable:
            raise ConfigError(f"hook function {self.name} cannot be imported by its name (a lambda, or a function "
                              "defined inside another): run it from Python with Hook(point, fn)")  # fmt: skip
        try:
            obj: Any = importlib.import_module(module)
            for part in qualname.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"hook function {self.name} could not be imported: {type(e).__name__}: {e}") from None
        if not callable(obj):
            raise ConfigError(f"hook function {self.name} is a {type(obj).__name__}, not a function")
        self._loaded.append(obj)
        return obj

    def __call__(self, value: Any) -> Any:
        return self.load()(value)

    def __str__(self) -> str:
        return self.name

_BLOCK = re.compile(r"blocks\.(\d+)\.(" + "|".join(re.escape(s) for s in BLOCK_SITES) + r")")


@INTERVENTIONS.register
@dataclass(frozen=True, eq=False)
class Hook(Edit):
    """``fn`` applied to the value at hook point ``point`` (docs/interventions.md); see the module's docstring.
    Two hooks are equal when they act at the same point with the same importable function (a hook read back from
    a record equals the one that wrote it); a lambda's hook equals only itself.

    >>> Hook("blocks.2.residual", abs).spec
    'hook:point=blocks.2.residual,fn=builtins:abs'
    >>> Hook("blocks.2.residual", lambda x: x).spec.endswith(":<lambda>")  # recorded, but not importable
    True
    >>> Hook("blocks.2.nowhere", abs)
    Traceback (most recent call last):
    ...
    peanchor.core.errors.ConfigError: Hook point 'blocks.2.nowhere' is not a hook point; they are: pe.table, rope.tables, pe.bias, pe.rotation, input.grid, blocks.{k}.attn.heads, blocks.{k}.attn, blocks.{k}.mlp, blocks.{k}.residual
    """

    kind = "hook"
    summary = "any Python function at one hook point"

    point: str = param(str, "a hook point: pe.table, rope.tables, pe.bias, pe.rotation or blocks.{k}.<site>", "")
    fn: Callable[[Any], Any] = param(FunctionName, "the function, as MODULE:NAME (imported before the first pass)",
                                     None)  # fmt: skip
    _site: tuple[str, int] | None = field(init=False, repr=False, default=None)

    def __post_init__(self) -> None:
        if self.fn is None:
            raise ConfigError(f"hook at {self.point!r} needs its function: fn=MODULE:NAME (e.g. mylab.hooks:double)")
        if not callable(self.fn):
            raise ConfigError(f"Hook({self.point!r}, ...): fn must be callable, got {type(self.fn).__name__}")
        block = _BLOCK.fullmatch(self.point)
        if block:
            object.__setattr__(self, "_site", (block.group(2), int(block.group(1))))
        elif self.point not in ("pe.table", "rope.tables", "pe.bias", "pe.rotation"):
            raise ConfigError(f"Hook point {self.point!r} is not a hook point; they are: {', '.join(POINTS)}")

    def required_points(self, hooks: HookPoints) -> tuple[str, ...]:
        return (f"blocks.{{k}}.{self._site[0]}",) if self._site else (self.point,)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Hook) or other.spec != self.spec:
            return False
        return isinstance(self.fn, FunctionName) and self.fn.importable or (  # the name stands for the function
            isinstance(other.fn, FunctionName) and other.fn.importable or self.fn is other.fn)

    def __hash__(self) -> int:
        return hash(self.spec)

    def check(self, hooks: HookPoints) -> None:
        super().check(hooks)
        if isinstance(self.fn, FunctionName):
            self.fn.load()  # before the first pass: a name that does not import is one line now
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
        return function_name(self.fn)

    @property
    def spec(self) -> str:
        """The spec text it reads back from: the point and where its function is imported from."""
        return f"hook:point={self.point},fn={self._name}"
