"""What a ``peanchor reproduce`` invocation asks for: :class:`ReproduceOptions` (preset, grid, data, ``--set``,
``--shift``, shard, device, jobs), each cell's training config and analysis plan (each resolved once), and
``--list`` (the ``peanchor train`` command of every cell).

A cell's :class:`~peanchor.analysis.plan.AnalysisPlan` is the preset's analysis defaults (with the cell's
``train.eval_batch_size`` as the batch size where the preset names none, and the preset's shifts at the cell's
resolution), then the command line (``--severities``, ``--shift``), then ``--set analysis.KEY=VALUE``; the
``analysis.*`` items are split off the ``--set`` items before the training config sees them, and are the same for
every cell (a condition prefix on one is refused).

Imports: :mod:`peanchor.study.cells`, :mod:`peanchor.settings.conditions`, :mod:`peanchor.settings.set_items` (the ``--set`` items, read once), :mod:`peanchor.presets.catalog`, :mod:`peanchor.analysis`
(``--shift`` and the plan, when resolved), :mod:`peanchor.core.tracking` (``--tensorboard`` needs TensorBoard).
"""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peanchor.settings.conditions import DEFAULT_CONDITIONS, Condition, parse_conditions
from peanchor.settings.set_items import SetItem
from peanchor.core.errors import ConfigError
from peanchor.presets.catalog import get_preset, preset_shifts, resolve_config
from peanchor.study.cells import Cell, grid_cells

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.analysis.plan import AnalysisPlan

__all__ = ["ReproduceOptions", "list_commands", "split_set_items"]

# --set analysis.KEY=VALUE goes to the analysis plan (peanchor.analysis.plan.SET_PREFIX; spelled here too so that
# --list and the option checks import no torch).
# The options that neither a cell's config nor its plan depends on: a copy that changes only these keeps what was
# resolved (ReproduceOptions.with_runtime).
RUNTIME = frozenset({"jobs", "jobs_auto", "progress", "debug"})


def split_set_items(items: Sequence[str | SetItem], conditions: Sequence[Condition]
                    ) -> tuple[list[SetItem], dict[str, list[SetItem]]]:  # fmt: skip
    """``--set`` items for every cell, and those prefixed ``<condition>:`` for one condition only, each read once
    (:class:`~peanchor.settings.set_items.SetItem`; a prefixed item is read without its prefix). An analysis
    setting is the same for every cell, so it takes no prefix.

    >>> common, per = split_set_items(["optim.lr=3e-4", "ape:optim.pe_lr_mult=10"], parse_conditions("none,ape"))
    >>> [(i.key, i.value) for i in common], {c: [str(i) for i in items] for c, items in per.items()}
    ([('optim.lr', 0.0003)], {'ape': ['optim.pe_lr_mult=10']})
    """
    names = {c.name for c in conditions}
    common: list[SetItem] = []
    per: dict[str, list[SetItem]] = {}
    for item in items:
        text = str(item)
        if isinstance(item, SetItem) or ":" not in text.partition("=")[0]:
            common.append(SetItem.parse(item))
            continue
        prefix, _, rest = text.partition(":")
        cond = prefix.strip().lower()
        if cond not in names:
            raise ConfigError(f"--set {text!r}: {cond!r} is not a condition of this grid ({', '.join(sorted(names))})")
        read = SetItem.parse(rest)
        if read.for_plan:
            raise ConfigError(f"--set {text!r}: the analysis plan is the same for every cell; drop the "
                              f"'{prefix}:' prefix")  # fmt: skip
        per.setdefault(cond, []).append(read)
    return common, per


@dataclass
class ReproduceOptions:
    preset: str = "cpu"
    out: Path | None = None  # default runs/reproduce-<preset>
    conditions: list[Condition] = None  # type: ignore[assignment]  # None: the preset's (else the paper's)
    seeds: int | None = None  # default DEFAULT_SEEDS[preset]
    data: str | None = None
    data_root: str | None = None
    class_list: str | None = None
    set_items: list[str | SetItem] = field(default_factory=list)  # config keys, analysis.KEY for the plan
    shifts: list[str] = field(default_factory=list)  # --shift specs (peanchor.analysis.shift_specs)
    severities: bool | None = None  # None: the preset's analysis defaults decide (then --set analysis.severities)
    shard: tuple[int, int] = (1, 1)
    device: str | None = None
    progress: bool = True
    tensorboard: bool = False  # also log training, analyses and the report's figures to TensorBoard
    debug: bool = False  # re-raise a cell's error instead of recording it
    jobs: int = 1  # cells run at once, each in its own single-threaded process (CPU)
    jobs_auto: bool = False  # --jobs auto: ``jobs`` is the CPUs/GPUs bound; fewer run at once if memory is short
    # Resolved once per invocation (a copy made by with_runtime shares them; one by dataclasses.replace starts
    # empty): the parsed --shift specs, each cell's training config and each cell's analysis plan, by cell name.
    _specs: list[Any] | None = field(default=None, init=False, repr=False, compare=False)
    _configs: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    _plans: dict[str, AnalysisPlan] = field(default_factory=dict, init=False, repr=False, compare=False)
    # The --set items, read once: (the training config's for every cell, by condition, the analysis plan's).
    _set: tuple[list[SetItem], dict[str, list[SetItem]], list[SetItem]] = field(
        default=((), {}, ()), init=False, repr=False, compare=False)  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.seeds is None:
            self.seeds = get_preset(self.preset).seeds
        if self.conditions is None:
            self.conditions = parse_conditions(get_preset(self.preset).conditions or DEFAULT_CONDITIONS)
        if self.seeds < 1:
            raise ConfigError(f"--seeds {self.seeds}: expected >= 1")
        if self.jobs < 1:
            raise ConfigError(f"--jobs {self.jobs}: expected >= 1")
        self.out = Path(self.out) if self.out is not None else Path("runs") / f"reproduce-{self.preset}"
        self.shift_specs()  # a bad --shift fails here, before anything is trained
        common, per = split_set_items(self.set_items, self.conditions)  # a bad item or prefix fails here too
        self._set = ([i for i in common if not i.for_plan], per, [i for i in common if i.for_plan])
        if self.tensorboard:
            from peanchor.core.tracking import require_tensorboard

            require_tensorboard()

    def with_runtime(self, **changes: Any) -> ReproduceOptions:
        """A copy with other :data:`RUNTIME` options (``jobs``, ``progress``, ...), sharing the resolved configs and
        plans, which do not depend on them."""
        if not set(changes) <= RUNTIME:
            raise ValueError(f"with_runtime changes only {', '.join(sorted(RUNTIME))}, not {', '.join(changes)}")
        copy = dataclasses.replace(self, **changes)
        copy._specs, copy._configs, copy._plans = self._specs, self._configs, self._plans
        return copy

    def shift_specs(self) -> list[Any]:  # -> list[ShiftSpec]
        if self._specs is None:
            from peanchor.analysis.shift_specs import parse_shift_specs

            self._specs = parse_shift_specs(self.shifts)
        return self._specs

    def plan_items(self) -> list[SetItem]:
        """The ``--set analysis.*`` items, read."""
        return list(self._set[2])

    @property
    def out_dir(self) -> Path:
        assert self.out is not None
        return self.out

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

    def cell_set_items(self, cell: Cell) -> list[SetItem]:
        """The training config's ``--set`` items for ``cell`` (the common ones, then its condition's), read."""
        common, per, _ = self._set
        return [*common, *per.get(cell.condition.name, [])]

    def cell_config(self, cell: Cell) -> Any:  # -> TrainConfig
        """``cell``'s training config, resolved once (the caller must not change it)."""
        if cell.name not in self._configs:
            self._configs[cell.name] = resolve_config(self.preset, self.cli_overrides(cell), self.cell_set_items(cell))
        return self._configs[cell.name]

    def grid_plan(self, cell: Cell) -> AnalysisPlan:
        """The analysis plan of the grid at ``cell``'s config, resolved once: the preset's analysis defaults, then
        ``--severities`` and ``--shift``, then ``--set analysis.KEY=VALUE``."""
        if cell.name not in self._plans:
            from peanchor.analysis.plan import resolve_plan

            config = self.cell_config(cell)
            size = config.data.img_size
            defaults = {"batch_size": config.train.eval_batch_size, **get_preset(self.preset).analysis}
            self._plans[cell.name] = resolve_plan(
                size, defaults=defaults, preset_shifts=preset_shifts(config.preset, size),
                shift_specs=self.shift_specs(), given={"severities": self.severities},
                set_items=self.plan_items(),
            )  # fmt: skip
        return self._plans[cell.name]

    def plan_for(self, cell: Cell) -> AnalysisPlan:
        """The plan ``cell`` is analysed with: :meth:`grid_plan`, without the α sweep for a model trained with RPT
        (the sweep is for models trained with a PE)."""
        plan = self.grid_plan(cell)
        return dataclasses.replace(plan, alphas=()) if cell.condition.rpt else plan


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
            parts += ["--set", str(item)]
        parts += ["--out", str(options.cell_dir(cell))]
        lines.append(" ".join(q(p) for p in parts))
    tail = [a for a in argv_tail]
    lines.append("# then analyse every cell and write the report (trained cells are reused):")
    lines.append(" ".join(q(p) for p in ["peanchor", "reproduce", *tail]))
    lines.append("# or, once every cell has its analysis (e.g. after sharded runs), only assemble the report:")
    lines.append(" ".join(q(p) for p in ["peanchor", "report", str(options.out_dir)]))
    return lines
