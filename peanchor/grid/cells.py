"""The grid: every (condition, seed) cell, in a fixed order, and round-robin shards of it.

Cells are ordered seed-major (every condition of seed 0, then seed 1, ...) so that an interrupted run has
compared every condition early. ``--shard i/n`` takes cells ``i-1, i-1+n, ...``.

Imports: :mod:`peanchor.conditions`, :mod:`peanchor.errors`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from peanchor.conditions import Condition
from peanchor.errors import ConfigError

__all__ = ["Cell", "grid_cells", "parse_shard", "shard_cells"]


@dataclass(frozen=True)
class Cell:
    """One (condition, seed) of the grid; ``index`` is its position in the grid."""

    index: int
    condition: Condition
    seed: int

    @property
    def name(self) -> str:
        return f"{self.condition.name}-s{self.seed}"


def grid_cells(conditions: Sequence[Condition], seeds: int | Sequence[int]) -> list[Cell]:
    """Every (condition, seed), seed-major.

    >>> from peanchor.conditions import parse_conditions
    >>> [c.name for c in grid_cells(parse_conditions("none,rpt"), 2)]
    ['none-s0', 'rpt-s0', 'none-s1', 'rpt-s1']
    """
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    pairs = [(c, s) for s in seed_list for c in conditions]
    return [Cell(i, c, s) for i, (c, s) in enumerate(pairs)]


def parse_shard(text: str) -> tuple[int, int]:
    """``"2/4"`` → ``(2, 4)``: shard 2 of 4, 1-based.

    >>> parse_shard("1/3")
    (1, 3)
    """
    try:
        i_text, n_text = text.split("/")
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise ConfigError(f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. 1/4") from None
    if not 1 <= i <= n:
        raise ConfigError(f"--shard {text!r}: expected i/n with 1 <= i <= n, e.g. 1/4")
    return i, n


def shard_cells(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The cells of shard ``index`` of ``count`` (1-based): round-robin by cell index.

    >>> from peanchor.conditions import parse_conditions
    >>> cells = grid_cells(parse_conditions("none,ape,rope"), 2)
    >>> [c.index for c in shard_cells(cells, 1, 4)], [c.index for c in shard_cells(cells, 4, 4)]
    ([0, 4], [3])
    """
    if not 1 <= index <= count:
        raise ConfigError(f"shard {index}/{count}: expected 1 <= i <= n")
    return [c for c in cells if c.index % count == index - 1]
