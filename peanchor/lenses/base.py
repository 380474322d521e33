"""The lens interface: a measure of spatial structure per layer, read from the analysis's passes with tokens in
order and under RPI, and everything the result files, TensorBoard, ``analyze``'s summary and the report need of it.

A lens is one :class:`Lens` subclass in one file of this folder, registered with
``@LENSES.register`` (:data:`~peanchor.lenses.registry.LENSES`) (docs/ARCHITECTURE.md, "How to add a lens"). The analysis
(:mod:`peanchor.analysis.passes`) drives it:

* once per analysis it builds the lens on a :class:`LensContext` (the model's patch grid, prefix tokens and depth,
  whether it hands out its attention weights, the number of evaluation images, the analysis plan's settings), if
  :meth:`Lens.applies` to that context; the lens reads its own typed options from ``self.options``, an instance of
  its ``options_type`` dataclass that the plan holds per lens (``--set analysis.lenses.<lens>.<option>=...``;
  :meth:`Lens.options_from`);
* per full pass (clean at α = 1, and each RPI draw) it asks for a fresh :meth:`Lens.accumulator` and, after every
  batch's forward, calls :meth:`Lens.update` with a :class:`LensBatch`: the patch tokens each block's attention
  sees, ``(B, L, N, D)``, prefix tokens dropped. A lens that ``reads_attention`` is also handed every block's
  attention weights during the forward (:meth:`Lens.attend`);
* under RPI a lens sees the pass's permutations: by default (``rpi_mode`` ``"per_image"``) one per image, from a
  stream keyed by the image's index, so nothing depends on the batch; with ``rpi_mode`` ``"per_call"`` (the
  paper's) one per forward call, shared by the batch, and a lens that asks for ``rpi = "per_image"`` is then fed
  from a pass of its own with one permutation per image (the position probe: a permutation shared by fit and
  held-out images could be learnt from the content);
* at the end, :meth:`Lens.record` turns the normal pass's accumulator and the RPI draws' into the lens's record
  (anything worth a line in the analysis log, such as a fallback taken, goes into the lens's ``notes``).

A lens that raises, at any of these steps, loses only its own record: the analysis records a :class:`LensFailure`
in its place (``"failed: <error>"`` in the files) and measures everything else. SSDC, the one ``required`` lens, is
the exception: the study's measures are made of it, so its failure fails the analysis.

A record is a dataclass of JSON types (a measured float is :data:`~peanchor.core.fileio.Number`); ``analysis.json`` and
each model of ``results.json`` hold it at the top level under the lens's name, validated against ``record_type``
when read (:mod:`peanchor.results.records`). Everything after the analysis reads records only, through the class methods:
:meth:`Lens.layers` (the per-layer curve of the figures, TensorBoard and the summary), :meth:`Lens.rows` (the CSV),
:meth:`Lens.scalars` (TensorBoard), :meth:`Lens.summary_lines` (``analyze``) and :meth:`Lens.sentences` (the
report).

Imports: :mod:`peanchor.core.fileio` (``Number``); :mod:`peanchor.metrics` (the bootstrap) and numpy lazily; torch only for
type annotations.
"""

from __future__ import annotations

import functools
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from peanchor.core.fileio import Number

if TYPE_CHECKING:  # pragma: no cover
    from torch import Tensor

__all__ = ["MODES", "MODE_LABELS", "HeadLayers", "LayerIntervals", "LayerPair", "Lens", "LensBatch", "LensContext", "LensFailure",
           "NoOptions", "Row", "UnknownLensRecord", "layer_value", "mean_and_std", "mean_over_draws",
           "plan_option"]  # fmt: skip

MODES: tuple[str, str] = ("normal", "rpi")  # tokens in order, and under RPI
MODE_LABELS = {"normal": "normal", "rpi": "RPI   "}  # as the summary lines print them, aligned


@dataclass(frozen=True)
class LensContext:
    """What a lens may know about the analysis it is part of."""

    grid: tuple[int, int]  # the patch grid (rows, cols); N = rows · cols
    num_prefix: int  # CLS and register tokens before the patches in the attention weights
    depth: int  # blocks, i.e. layers of tokens
    num_images: int  # in the evaluation set
    has_attention_weights: bool  # whether the model hands out its attention weights during a pass
    settings: Mapping[str, Any]  # the analysis plan's settings by name (seed, lens_options, ...)

    @property
    def seed(self) -> int:
        """The plan's seed (of the RPI permutations, the bootstrap and the probe's split)."""
        return int(self.settings.get("seed", 0))

    @property
    def rpi_mode(self) -> str:
        """``"per_image"`` (a permutation per image, from a stream keyed by the image's index) or ``"per_call"``
        (the paper's: one per forward call, shared by the batch)."""
        return str(self.settings.get("rpi_mode") or "per_image")

    @functools.cached_property
    def bootstrap(self) -> Any:  # peanchor.metrics.bootstrap.GroupBootstrap | None
        """The analysis's one resampling of the images (:mod:`peanchor.metrics.bootstrap`): ``bootstrap``
        replicates of ``bootstrap_groups`` groups, seeded with the seed; None with ``bootstrap`` 0."""
        replicates = int(self.settings.get("bootstrap") or 0)
        if not replicates or self.num_images < 1:
            return None
        from peanchor.metrics.bootstrap import DEFAULT_GROUPS, GroupBootstrap

        groups = int(self.settings.get("bootstrap_groups") or DEFAULT_GROUPS)
        return GroupBootstrap.of(self.num_images, groups=groups, replicates=replicates, seed=self.seed)

    @property
    def groups(self) -> int:
        """How many groups the accumulators keep their sums in (0: no bootstrap)."""
        return self.bootstrap.groups if self.bootstrap is not None else 0


@dataclass(frozen=True)
class NoOptions:
    """The options of a lens that has none."""


PLAN_KEY = "plan_key"


def plan_option(default: Any, plan_key: str) -> Any:
    """A lens option that an older analysis plan field also sets (SSDC's ``mode`` is ``analysis.ssdc_mode``): the
    plan keeps that field, for the files that record it, and the option reads it. Use it as a dataclass field::

        mode: str = plan_option("mean_similarity", "ssdc_mode")
    """
    return field(default=default, metadata={PLAN_KEY: plan_key})


@dataclass(frozen=True)
class LensBatch:
    """One batch of one pass, after its forward."""

    tokens: Tensor  # (B, L, N, D): the patch tokens of the pass's first L layers, in slot order
    start: int  # the index of the batch's first image in the evaluation set
    token_perm: Tensor | None  # the pass's permutation, (N,) or (B, N); None with tokens in order


@dataclass(frozen=True)
class Row:
    """One row of ``analysis.csv`` (its other columns: alpha 1, no shift, no severity)."""

    metric: str
    value: Any
    layer: Any = ""
    head: Any = ""


@dataclass(frozen=True)
class LensFailure:
    """What stands in a model's measures for a lens that failed in its analysis: the error, in one line. The other
    lenses, the accuracies and the FS are measured all the same; the files hold it as the string ``"failed: ..."``
    under the lens's name, and an analysis made again measures it again."""

    error: str

    PREFIX: ClassVar[str] = "failed: "

    @classmethod
    def of(cls, error: BaseException) -> LensFailure:
        """The failure of ``error``: its type and the first line of its message."""
        lines = str(error).strip().splitlines()
        return cls(f"{type(error).__name__}: {lines[0]}" if lines else type(error).__name__)

    @classmethod
    def parse(cls, value: Any) -> LensFailure | None:
        """The failure a file's value says, or None where it is not one."""
        if isinstance(value, str) and value.startswith(cls.PREFIX):
            return cls(value[len(cls.PREFIX) :])
        return None

    def __str__(self) -> str:
        return f"{self.PREFIX}{self.error}"


@dataclass(frozen=True)
class UnknownLensRecord:
    """The record of a lens that is not installed where a result file is read (a plug-in of another install): kept
    as it was read, and written back the same, so that reading and writing a file never loses a measurement."""

    data: Any


@dataclass(kw_only=True)
class LayerPair:
    """A value per layer, with tokens in order and under RPI (mean over RPI draws)."""

    normal: list[Number]
    rpi: list[Number]


@dataclass(kw_only=True)
class LayerIntervals:
    """A percentile interval per layer, ``[[low per layer], [high per layer]]``, with tokens in order and under RPI
    (over images and RPI draws), from the analysis's groups bootstrap."""

    normal: list[list[Number]]
    rpi: list[list[Number]]


@dataclass(kw_only=True)
class HeadLayers:
    """A value per layer and head, ``[layer][head]``, with tokens in order and under RPI (mean over RPI draws)."""

    normal: list[list[Number]]
    rpi: list[list[Number]]

    def layer_means(self, mode: str) -> list[float]:
        """The mean over heads of every layer, for ``mode`` ``"normal"`` or ``"rpi"``."""
        return [sum(heads) / len(heads) if heads else float("nan") for heads in getattr(self, mode)]


def mean_over_draws(values: Sequence[Tensor]) -> list[Any]:
    """The mean of equally shaped tensors (one per RPI draw), as nested lists of floats."""
    import torch

    return torch.stack(list(values)).mean(dim=0).tolist()


def mean_and_std(draws: Sequence[Sequence[float]]) -> tuple[list[float], list[float]]:
    """Per-layer mean and sample std (ddof=1; 0.0 with a single draw) over RPI draws ``[draw][layer]``.

    >>> mean_and_std([[1.0, 2.0], [3.0, 2.0]])
    ([2.0, 2.0], [1.4142135623730951, 0.0])
    """
    import numpy as np

    arr = np.asarray(draws, dtype=np.float64)  # (K, L)
    mean = arr.mean(axis=0)
    std = arr.std(axis=0, ddof=1) if arr.shape[0] > 1 else np.zeros(arr.shape[1])
    return [float(v) for v in mean], [float(v) for v in std]


def layer_value(v: Any, digits: int = 2) -> str:
    """A per-layer value as the summary lines print it (``n/a`` when not finite)."""
    return f"{v:.{digits}f}" if isinstance(v, (int, float)) and math.isfinite(v) else "n/a"


class Lens(ABC):
    """A measure of spatial structure per layer (see the module docstring for how the analysis drives it)."""

    name: ClassVar[str]  # the record's key in the result files; also the CSV's and TensorBoard's prefix
    title: ClassVar[str]  # for people: the summary, the report's table, figure panels
    description: ClassVar[str]  # one sentence for the report: what it measures, and what RPI does to it
    record_type: ClassVar[type]  # the dataclass of its record
    ylabel: ClassVar[str]  # the per-layer value, as a figure's axis says it
    stat: ClassVar[Literal["max", "mean"]] = "max"  # the report's one number per model: max or mean over layers
    stat_label: ClassVar[str]  # the report's table column, e.g. "max SSDC"
    table_note: ClassVar[str] = ""  # what the report's table caption says of its number, if anything
    order: ClassVar[int] = 100  # where it comes in tables, figures and files (lower first)
    required: ClassVar[bool] = False  # measured in every analysis (SSDC: ΔSSDC and the claims are made of it)
    reads_attention: ClassVar[bool] = False  # fed the attention weights during each pass (:meth:`attend`)
    rpi: ClassVar[Literal["per_call", "per_image"]] = "per_call"  # "per_image": it needs one permutation per image
    # (the default RPI gives it that; under per-call RPI it is fed from a pass of its own)
    truncated: ClassVar[bool] = False  # also measured in the truncated passes (layers 0 and 1, no head) of the α
    # sweep under RPI, which read it through :meth:`curve` (SSDC: ΔSSDC at each α)
    zero_line: ClassVar[bool] = True  # the report's figure marks 0 on its axis
    options_type: ClassVar[type] = NoOptions  # a frozen dataclass of its options, with their defaults

    def __init__(self, context: LensContext, options: Any = None) -> None:
        self.context = context
        self.options = options if options is not None else self.options_from(context.settings)
        self.notes: list[str] = []  # what the analysis log and the record's notes should say of this measurement

    @classmethod
    def options_from(cls, settings: Mapping[str, Any]) -> Any:
        """Its options from an analysis plan's settings (:meth:`AnalysisPlan.settings
        <peanchor.analysis.plan.AnalysisPlan.settings>`): each from ``lens_options[name]``, or from the plan field a
        :func:`plan_option` names; the dataclass's default where neither says."""
        own = (settings.get("lens_options") or {}).get(cls.name, {})
        values = {}
        for f in fields(cls.options_type):
            key = f.metadata.get(PLAN_KEY)
            if key is not None and settings.get(key) is not None:
                values[f.name] = settings[key]
            elif f.name in own:
                values[f.name] = own[f.name]
        return cls.options_type(**values)

    # ---- the analysis ------------------------------------------------------------------------------------------
    @classmethod
    def applies(cls, context: LensContext) -> bool:
        """Whether the lens can be measured on this model and evaluation set (default: always)."""
        return True

    @abstractmethod
    def accumulator(self) -> Any:
        """A fresh state for one pass."""

    @abstractmethod
    def update(self, state: Any, batch: LensBatch) -> None:
        """Fold one batch of a pass into ``state``."""

    def attend(self, state: Any, block: int, weights: Tensor) -> None:
        """Fold block ``block``'s attention weights ``(b, H, T, T)`` into ``state`` (lenses that ``reads_attention``;
        see :data:`peanchor.models.interface.AttentionSink`)."""
        raise NotImplementedError(f"the {self.name} lens does not read attention weights")

    @abstractmethod
    def record(self, normal: Any, rpi: Sequence[Any]) -> Any:
        """The record of the normal pass's state and the RPI draws' states (one per draw)."""

    def curve(self, state: Any) -> list[float]:
        """One pass's value per layer, from its state: what a lens that is measured in the ``truncated`` passes
        offers the α sweep (a lens that is not need not have one)."""
        raise NotImplementedError(f"the {self.name} lens offers no per-layer curve of a pass")

    def rpi_curve(self, states: Sequence[Any]) -> list[float]:
        """The mean over RPI draws (one state per draw) of :meth:`curve`, per layer."""
        return mean_and_std([self.curve(state) for state in states])[0]

    # ---- readers of a record -------------------------------------------------------------------------------------
    @classmethod
    @abstractmethod
    def layers(cls, record: Any, mode: str) -> list[float]:
        """One value per layer, for ``mode`` ``"normal"`` or ``"rpi"``."""

    @classmethod
    def reference(cls, record: Any) -> float | None:
        """A value the figure marks with a dashed line (e.g. what uniform attention gives), if the lens has one."""
        return None

    reference_label: ClassVar[str] = ""

    @classmethod
    def rows(cls, record: Any) -> Iterator[Row]:
        """Its rows of ``analysis.csv``: by default ``<name>_<mode>`` per layer."""
        for mode in MODES:
            for layer, value in enumerate(cls.layers(record, mode)):
                yield Row(f"{cls.name}_{mode}", value, layer)

    @classmethod
    def scalars(cls, record: Any) -> Iterator[tuple[str, Any, int]]:
        """Its TensorBoard scalars ``(tag, value, step)``: by default ``<name>/<mode>`` with the layer as the step."""
        for mode in MODES:
            for layer, value in enumerate(cls.layers(record, mode)):
                yield f"{cls.name}/{mode}", value, layer

    @classmethod
    def summary_lines(cls, record: Any) -> list[str]:
        """Its lines in ``peanchor analyze``'s summary: by default the per-layer values, normal and under RPI."""
        return [f"  {cls.title} {MODE_LABELS[mode]} " + " ".join(layer_value(v) for v in cls.layers(record, mode))
                for mode in MODES]  # fmt: skip

    @classmethod
    def sentences(cls, means: Mapping[str, Mapping[str, Mapping[str, float]]], reference: float | None,
                  fmt: Callable[..., str]) -> list[str]:  # fmt: skip
        """What the report says of it, from ``means[lens][mode][condition]`` (the mean over seeds of every lens's
        per-model number; finite values only), its :meth:`reference` (when every model has the same one) and the
        report's number format ``fmt(x, digits=3)``. Default: nothing."""
        return []
