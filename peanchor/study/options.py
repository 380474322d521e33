"""What a ``peanchor reproduce`` invocation asks for: :class:`ReproduceOptions` (preset, grid, data, ``--set``,
``--shift``, shard, device, jobs), each cell's training config, and ``--list`` (the ``peanchor train`` command of
every cell).

Imports: :mod:`peanchor.study.cells`, :mod:`peanchor.conditions`, :mod:`peanchor.presets`, :mod:`peanchor.analysis`
(``--shift``, when checked), :mod:`peanchor.tracking` (``--tensorboard`` needs TensorBoard).
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from peanchor.conditions import DEFAULT_CONDITIONS, Condition, parse_conditions
from peanchor.errors import ConfigError
from peanchor.presets import AnalysisPlan, get_preset, resolve_config
from peanchor.study.cells import Cell, grid_cells

__all__ = ["ReproduceOptions", "list_commands", "split_set_items"]


def split_set_items(items: Sequence[str], conditions: Sequence[Condition]) -> tuple[list[str], dict[str, list[str]]]:
    """``--set`` items for every cell, and those prefixed ``<condition>:`` for one condition only.

    >>> split_set_items(["optim.lr=3e-4", "ape:optim.pe_lr_mult=10"], parse_conditions("none,ape"))
    (['optim.lr=3e-4'], {'ape': ['optim.pe_lr_mult=10']})
    """
    names = {c.name for c in conditions}
    common: list[str] = []
    per: dict[str, list[str]] = {}
    for item in items:
        key = item.partition("=")[0]
        if ":" in key:
            prefix, _, rest = item.partition(":")
            cond = prefix.strip().lower()
            if cond not in names:
                raise ConfigError(
                    f"--set {item!r}: {cond!r} is not a condition of this grid ({', '.join(sorted(names))})"
                )
            per.setdefault(cond, []).append(rest)
        else:
            common.append(item)
    return common, per


@dataclass
class ReproduceOptions:
    preset: str = "cpu"
    out: Path | None = None  # default runs/reproduce-<preset>
    conditions: list[Condition] = field(default_factory=lambda: parse_conditions(DEFAULT_CONDITIONS))
    seeds: int | None = None  # default DEFAULT_SEEDS[preset]
    data: str | None = None
    data_root: str | None = None
    class_list: str | None = None
    set_items: list[str] = field(default_factory=list)
    shifts: list[str] = field(default_factory=list)  # --shift specs (peanchor.analysis.shift_specs)
    severities: bool | None = None  # None: the preset's analysis plan decides
    shard: tuple[int, int] = (1, 1)
    device: str | None = None
    progress: bool = True
    tensorboard: bool = False  # also log training, analyses and the report's figures to TensorBoard
    debug: bool = False  # re-raise a cell's error instead of recording it
    jobs: int = 1  # cells run at once, each in its own single-threaded process (CPU)
    jobs_auto: bool = False  # --jobs auto: ``jobs`` is the CPUs/GPUs bound; fewer run at once if memory is short

    def __post_init__(self) -> None:
        if self.seeds is None:
            self.seeds = get_preset(self.preset).seeds
        if self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: expected >= 1")
        if self.jobs < 1:
            raise ConfigError(f"--jobs {self.jobs}: expected >= 1")
        self.out = Path(self.out) if self.out is not None else Path("runs") / f"reproduce-{self.preset}"
        if self.severities is None:
            self.severities = self.plan.severities
        self.shift_specs()  # a bad --shift fails here, before anything is trained
        if self.tensorboard:
            from peanchor.tracking import require_tensorboard

            require_tensorboard()

    def shift_specs(self) -> list[Any]:  # -> list[ShiftSpec]
        from peanchor.analysis.shift_specs import parse_shift_specs

        return parse_shift_specs(self.shifts)

    @property
    def out_dir(self) -> Path:
        assert self.out is not None
        return self.out

    @property
    def plan(self) -> AnalysisPlan:
        return get_preset(self.preset).analysis

    def cells(self) -> list[Cell]:
        assert self.seeds is not None
        return grid_cells(self.conditions, self.seeds)

    def cell_dir(self, cell: Cell) -> Path:
        return self.out_dir / "runs" / cell.name

    def cli_overrides(self, cell: Cell) -> dict[str, Any]:
        return {
            "data.name": self.data,
            "data.root": self.data_root,
            "data.class_list": self.class_list,
            "model.pe": cell.condition.pe,
            "train.rpt": cell.condition.rpt,
            "train.seed": cell.seed,
            "train.device": self.device,
        }

    def cell_set_items(self, cell: Cell) -> list[str]:
        common, per = split_set_items(self.set_items, self.conditions)
        return common + per.get(cell.condition.name, [])

    def cell_config(self, cell: Cell) -> Any:  # -> TrainConfig
        return resolve_config(self.preset, self.cli_overrides(cell), self.cell_set_items(cell))


def list_commands(options: ReproduceOptions, argv_tail: Sequence[str] = ()) -> list[str]:
    """One ``peanchor train`` line per cell (exactly the config ``reproduce`` would train), then the final steps.

    ``argv_tail`` is the reproduce invocation's own arguments (to echo in the final ``reproduce`` line).
    """
    q = shlex.quote
    lines = []
    for cell in options.cells():
        parts = ["peanchor", "train", "--preset", options.preset, "--pe", cell.condition.pe, "--seed", str(cell.seed)]
        if cell.condition.rpt:
            parts.append("--rpt")
        for flag, value in (("--data", options.data), ("--data-root", options.data_root),
                            ("--class-list", options.class_list), ("--device", options.device)):  # fmt: skip
            if value is not None:
                parts += [flag, value]
        for item in options.cell_set_items(cell):
            parts += ["--set", item]
        parts += ["--out", str(options.cell_dir(cell))]
        lines.append(" ".join(q(p) for p in parts))
    tail = [a for a in argv_tail]
    lines.append("# then analyse every cell and write the report (trained cells are reused):")
    lines.append(" ".join(q(p) for p in ["peanchor", "reproduce", *tail]))
    lines.append("# or, once every cell has its analysis (e.g. after sharded runs), only assemble the report:")
    lines.append(" ".join(q(p) for p in ["peanchor", "report", str(options.out_dir)]))
    return lines
