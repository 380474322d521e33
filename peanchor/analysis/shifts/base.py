"""What a shift kind is: :class:`ShiftKind` (its parameters, its severity tables, its checks and its kernel),
:class:`Param` (one parameter and its rule) and :func:`register`, the decorator that puts a kind in the registry.

A kind is one module under :mod:`peanchor.analysis.shifts.kinds`; see docs/ARCHITECTURE.md, "How to add a shift".
Kernels map a uint8 batch ``(B, C, H, W)`` to a uint8 batch of the same shape and are deterministic; a noise kind
seeds its draws per image index (:func:`image_generator`), so chunking a set never changes its result.

Imports: :mod:`peanchor.core.errors`, :mod:`peanchor.core.registry`; torch only inside :func:`image_generator` and
:func:`to_uint8`'s callers (building the CLI's help reads the registry and must not load torch).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from peanchor.core.errors import ConfigError
from peanchor.core.registry import Registry

if TYPE_CHECKING:
    import torch

__all__ = ["KINDS", "NOISE_SEED", "TABLE_NAMES", "Param", "ShiftKind", "image_generator", "register", "to_uint8"]

# The ImageNet-C-style tables, each with the image side its severities were made for (Hendrycks & Dietterich's
# make_imagenet_c.py, make_tinyimagenet_c.py, make_cifar_c.py).
TABLE_NAMES: tuple[str, ...] = ("imagenet-c", "tiny-imagenet-c", "cifar-10-c")


@dataclass(frozen=True)
class Param:
    """One parameter of a kind.

    ``kind`` is ``int`` or ``float`` (a float parameter also takes an integer and stores it as a float). ``rule``
    says in words what ``valid`` accepts ("an integer in 1..100"); a value it refuses is a :class:`ConfigError`
    ``"<kind> <param> must be <rule>, got <value>"``. A parameter that is not ``required`` takes ``default`` when
    it is not given. ``abbrev`` labels it in a shift's name (``jpeg_q58``; a value equal to the default is left
    out), ``metavar`` in the CLI's help. ``with_severity``: it may be given beside ``severity=N`` (a noise seed).
    """

    name: str
    kind: type = float
    rule: str = ""
    valid: Callable[[Any], bool] | None = None
    required: bool = False
    default: Any = None
    abbrev: str = ""
    metavar: str = "X"
    with_severity: bool = False

    def check(self, shift: str, value: Any) -> Any:
        """``value`` checked and normalised (an integer float parameter becomes a float)."""
        if value is None and not self.required:
            return self.default
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ConfigError(f"{shift} {self.name} must be {self.rule or 'an integer'}, got {value!r}")
        else:
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"{shift} {self.name} must be a finite number, got {value!r}")
            value = float(value)
        if self.valid is not None and not self.valid(value):
            raise ConfigError(f"{shift} {self.name} must be {self.rule}, got {value!r}")
        return value


# The seed of a noise kind: its draws for image i of a set come from image_generator(seed, i).
NOISE_SEED = Param("seed", int, default=0, abbrev="seed", metavar="N", with_severity=True)


class ShiftKind:
    """One kind of shift. Subclass it in a module of :mod:`peanchor.analysis.shifts.kinds` and decorate it with
    :func:`register`; parsing, the CLI's help, :class:`~peanchor.analysis.shifts.Shift`'s checks, its name and
    description and the severity sweeps all come from these attributes.

    - ``name``: the kind, as ``--shift NAME:...`` and the result files spell it;
    - ``summary``: one line for the help and the docs;
    - ``params``: its :class:`Param` s, in the order names and descriptions list them;
    - ``table_params``: the parameters a severity row sets, in the order of the row (the generation scripts' ``c``);
      the first is the kind's main parameter, which ``--shift`` needs when no severity is given;
    - ``tables``: table name (:data:`TABLE_NAMES`) → severity 1..5 rows: a value, or a tuple of values when
      ``table_params`` has more than one;
    - :meth:`kernel`: the corruption itself; :meth:`check` and :meth:`resolve` when the parameters need more than
      their own rules.
    """

    name: ClassVar[str]
    summary: ClassVar[str]
    params: ClassVar[tuple[Param, ...]]
    table_params: ClassVar[tuple[str, ...]]
    tables: ClassVar[Mapping[str, tuple[Any, ...]]]

    @property
    def main(self) -> str:
        """The parameter a severity table sets (the first, when it sets several)."""
        return self.table_params[0]

    @property
    def param_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params)

    def values(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every parameter of the kind, checked, in order, from ``given`` (``None`` stands for "not given")."""
        for key, value in given.items():
            if key not in self.param_names and value is not None:
                raise ConfigError(f"shift {self.name!r} takes {', '.join(self.param_names)}; got {key}={value!r}")
        out = {p.name: p.check(self.name, given.get(p.name)) for p in self.params}
        self.check(out)
        return out

    def check(self, values: dict[str, Any]) -> None:
        """Checks that involve more than one parameter's own rule (none by default)."""

    def resolve(self, values: dict[str, Any], img_size: int) -> dict[str, Any]:
        """``values`` with every default that depends on the image side fixed; a :class:`ConfigError` when they
        cannot work on ``img_size`` px images (found before a long run). Default: nothing depends on it."""
        return values

    def label(self, values: Mapping[str, Any]) -> str:
        """A short, file-name-safe name: the kind, then ``_<abbrev><value>`` for each value not at its default."""
        parts = [self.name]
        for p in self.params:
            value = values[p.name]
            if value is not None and value != p.default:
                parts.append(f"_{p.abbrev}{value:g}" if isinstance(value, float) else f"_{p.abbrev}{value}")
        return "".join(parts)

    def table_values(self, table: str, severity: int) -> dict[str, Any]:
        """The parameters that severity ``severity`` (1..5) of ``table`` sets."""
        if table not in self.tables:
            raise ConfigError(f"shift {self.name!r} has no {table} severity table")
        row = self.tables[table][severity - 1]
        row = row if isinstance(row, tuple) else (row,)
        types = {p.name: p.kind for p in self.params}
        return {name: types[name](value) for name, value in zip(self.table_params, row, strict=True)}

    def kernel(self, images: torch.Tensor, start_index: int, **values: Any) -> torch.Tensor:
        """Corrupt a uint8 batch ``(B, C, H, W)``; ``images[0]`` is image ``start_index`` of its set."""
        raise NotImplementedError


def _check_kind(cls: type[ShiftKind]) -> None:
    """A kind's parameters and tables, checked once, when it is registered."""
    kind = cls()
    names = kind.param_names
    if len(set(names)) != len(names) or "kind" in names or "severity" in names or not kind.table_params:
        raise ValueError(f"shift kind {kind.name!r}: parameter names must be distinct, not 'kind' or 'severity'")
    if not set(kind.table_params) <= set(names):
        raise ValueError(f"shift kind {kind.name!r}: table_params {kind.table_params} are not all parameters")
    for table, rows in kind.tables.items():
        width = {len(r) if isinstance(r, tuple) else 1 for r in rows}
        if table not in TABLE_NAMES or len(rows) != 5 or width != {len(kind.table_params)}:
            raise ValueError(f"shift kind {kind.name!r}: table {table!r} needs 5 rows of {kind.table_params}")


# The registry: kind name → kind (an instance of its class), filled by @register as
# peanchor.analysis.shifts.registry imports the kinds, and by plug-ins (entry-point group "peanchor.shifts").
KINDS: Registry[ShiftKind] = Registry("shift kind", "peanchor.shifts", make=lambda cls: cls(), check=_check_kind)


def register(cls: type[ShiftKind]) -> type[ShiftKind]:
    """Class decorator: add a :class:`ShiftKind` to the registry under its ``name`` (its tables are checked here,
    once).

    Returns:
        ``cls`` itself, now registered.
    """
    if not (isinstance(cls, type) and issubclass(cls, ShiftKind)):
        raise TypeError(f"register takes a ShiftKind subclass, got {cls!r}")
    return KINDS.register(cls)


def image_seed(seed: int, index: int) -> int:
    """A stable 63-bit seed per (seed, image index); distinct seeds never share a stream of indices."""
    digest = hashlib.blake2b(f"peanchor-noise:{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def image_generator(seed: int, index: int) -> torch.Generator:
    """A CPU ``torch.Generator`` for image ``index`` of a set under a noise kind's ``seed``."""
    import torch

    return torch.Generator().manual_seed(image_seed(seed, index))


def to_uint8(x: torch.Tensor) -> torch.Tensor:
    """A float batch on the 0..255 scale, clipped and rounded to the nearest grey level (ImageNet-C truncates)."""
    return x.clamp_(0.0, 255.0).round_().byte()
