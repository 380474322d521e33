"""The grid: every (condition, seed) cell, in a fixed order, and round-robin shards of it.

Cells are ordered seed-major (every condition of seed 0, then seed 1, ...) so that an interrupted run has
compared every condition early. ``--shard i/n`` (1-based) takes cells ``i-1, i-1+n, ...``; ``--shard auto`` reads
the shard from a Slurm array task's variables, so an array of any base runs every cell exactly once.

Imports: :mod:`peanchor.settings.conditions`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from peanchor.settings.conditions import Condition
from peanchor.core.errors import ConfigError

__all__ = ["Cell", "grid_cells", "parse_shard", "shard_cells", "slurm_array_shard"]


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

    >>> from peanchor.settings.conditions import parse_conditions
    >>> [c.name for c in grid_cells(parse_conditions("none,rpt"), 2)]
    ['none-s0', 'rpt-s0', 'none-s1', 'rpt-s1']
    """
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    pairs = [(c, s) for s in seed_list for c in conditions]
    return [Cell(i, c, s) for i, (c, s) in enumerate(pairs)]


SLURM_ARRAY_VARS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT")
_SHARD_FORMS = "expected I/N with 1 <= I <= N (1-based), e.g. 1/4, or auto (from a Slurm array's variables)"


def parse_shard(text: str, environ: Mapping[str, str] | None = None) -> tuple[int, int]:
    """``"2/4"`` → ``(2, 4)``: shard 2 of 4, **1-based**; ``"auto"`` → this Slurm array task's shard.

    >>> parse_shard("1/3")
    (1, 3)
    >>> parse_shard("auto", {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "0", "SLURM_ARRAY_TASK_COUNT": "20"})
    (1, 20)
    """
    if text.strip().lower() == "auto":
        return slurm_array_shard(os.environ if environ is None else environ)
    try:
        i_text, n_text = text.split("/")
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise ConfigError(f"--shard {text!r}: {_SHARD_FORMS}") from None
    if n < 1:
        raise ConfigError(f"--shard {text!r}: N must be >= 1; {_SHARD_FORMS}")
    if i == 0:
        raise ConfigError(
            f"--shard {text!r}: shards are numbered from 1 (1/{n} ... {n}/{n}); for a 0-based Slurm array "
            f"(--array=0-{n - 1}) use --shard auto, or --shard $((SLURM_ARRAY_TASK_ID + 1))/{n}"
        )
    if not 1 <= i <= n:
        raise ConfigError(f"--shard {text!r}: shard {i} does not exist; {_SHARD_FORMS}")
    return i, n


def slurm_array_shard(environ: Mapping[str, str]) -> tuple[int, int]:
    """``(shard, count)`` of this Slurm array task: the task's position in the array, whatever its base or step.

    With ``--array=0-19`` task 0 is shard 1/20 and task 19 shard 20/20; with ``--array=1-20`` task 1 is 1/20;
    with ``--array=0-38:2`` task 2 is 2/20. A list that is not evenly spaced (``--array=1,2,7``) has no
    position to derive, which is a :class:`ConfigError` saying so.

    >>> slurm_array_shard({"SLURM_ARRAY_TASK_ID": "5", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "5"})
    (5, 5)
    """
    missing = [v for v in SLURM_ARRAY_VARS if not environ.get(v)]
    if missing:
        raise ConfigError(
            f"--shard auto needs a Slurm array task's variables ({', '.join(missing)} not set): submit with "
            "sbatch --array=..., or give --shard I/N (1-based)"
        )
    try:
        task, low, count = (int(environ[v]) for v in SLURM_ARRAY_VARS)
        step = int(environ.get("SLURM_ARRAY_TASK_STEP") or 1)
        high = int(environ.get("SLURM_ARRAY_TASK_MAX") or low + (count - 1) * step)
    except ValueError:
        shown = ", ".join(f"{v}={environ.get(v)!r}" for v in SLURM_ARRAY_VARS)
        raise ConfigError(f"--shard auto: Slurm's array variables are not integers ({shown})") from None
    offset = task - low
    if count < 1 or step < 1 or offset < 0 or offset % step or high - low != (count - 1) * step or task > high:
        raise ConfigError(
            f"--shard auto: array task {task} of {count} tasks from {low} to {high} (step {step}) is not evenly "
            f"spaced, so its shard cannot be derived; submit a range such as --array=0-{max(count - 1, 0)}, or "
            "give --shard I/N (1-based)"
        )
    return offset // step + 1, count


def shard_cells(cells: Sequence[Cell], index: int, count: int) -> list[Cell]:
    """The cells of shard ``index`` of ``count`` (1-based): round-robin by cell index.

    >>> from peanchor.settings.conditions import parse_conditions
    >>> cells = grid_cells(parse_conditions("none,ape,rope"), 2)
    >>> [c.index for c in shard_cells(cells, 1, 4)], [c.index for c in shard_cells(cells, 4, 4)]
    ([0, 4], [3])
    """
    if not 1 <= index <= count:
        raise ConfigError(f"shard {index}/{count}: expected 1 <= i <= n")
    return [c for c in cells if c.index % count == index - 1]
