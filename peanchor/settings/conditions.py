"""The study's conditions: what each model is (a positional encoding, trained with or without RPT), how reports
label and draw it, and the paper's reference numbers for it.

A condition name is the PE's name (``ape``, ``rope``, ...), or ``<pe>-rpt`` for a PE trained with random
permutations (RPT), except that APE trained with RPT is the paper's ``rpt``. :data:`CONDITIONS` lists the conditions
peanchor knows by name, in the order tables and legends show them; any other PE parses too (it gets a plain label).
:data:`PAPER` is the paper's setting, in which the reference rows were measured.

Imports: :mod:`peanchor.core.errors`, and :mod:`peanchor.pe` lazily (the PE registry, to check a name), so that every layer, the report
included, can take its condition facts from here without importing torch.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from peanchor.core.errors import ConfigError, did_you_mean

__all__ = [
    "CONDITIONS",
    "DEFAULT_CONDITIONS",
    "PAPER",
    "PAPER_CHECKPOINTS",
    "AlphaSweepReference",
    "Condition",
    "MeanStd",
    "PaperReference",
    "PaperSetting",
    "PlotStyle",
    "condition_name",
    "known",
    "label",
    "ordered",
    "parse_condition",
    "parse_conditions",
]


@dataclass(frozen=True)
class MeanStd:
    """A mean ± standard deviation over the paper's seeds."""

    mean: float
    std: float


@dataclass(frozen=True)
class PaperReference:
    """The paper's Table numbers for one condition: clean top-1 and the Fragility Scores under its two shifts."""

    clean_acc: MeanStd
    fs_jpeg: MeanStd
    fs_blur: MeanStd

    def get(self, metric: str) -> MeanStd | None:
        """The number for ``metric`` (``clean_acc``, ``fs_jpeg``, ``fs_blur``), None for any other."""
        return getattr(self, metric, None) if metric in ("clean_acc", "fs_jpeg", "fs_blur") else None


@dataclass(frozen=True)
class AlphaSweepReference:
    """The paper's α sweep for one condition: means over ``seeds`` at each α (FS under JPEG)."""

    seeds: int
    alpha: tuple[float, ...]
    delta_ssdc: tuple[float, ...]
    fs_jpeg: tuple[float, ...]

    def at(self, alpha: float) -> tuple[float, float] | None:
        """``(ΔSSDC, FS jpeg)`` at ``alpha``, None where the paper gives no number."""
        for a, d, f in zip(self.alpha, self.delta_ssdc, self.fs_jpeg):
            if abs(a - alpha) < 1e-9:
                return d, f
        return None


@dataclass(frozen=True)
class PlotStyle:
    """How figures draw a condition: a marker *and* a line style as well as a colour (Okabe-Ito), so that the
    figures stay readable in black and white."""

    marker: str
    linestyle: Any  # a matplotlib line style: a name or (offset, (on, off, ...))
    colour: str


@dataclass(frozen=True)
class Condition:
    """A trained condition: positional encoding ``pe``, trained with RPT or not.

    The facts below the first three fields are known only for the conditions in :data:`CONDITIONS`; they take no
    part in equality, so a parsed name equals the known condition of the same name.
    """

    name: str
    pe: str
    rpt: bool
    paper_name: str | None = field(default=None, compare=False, repr=False)
    paper_checkpoint: str | None = field(default=None, compare=False, repr=False)  # released files' name prefix
    reference: PaperReference | None = field(default=None, compare=False, repr=False)
    alpha_sweep: AlphaSweepReference | None = field(default=None, compare=False, repr=False)
    ssdc_note: str | None = field(default=None, compare=False, repr=False)  # the paper on SSDC per layer (RPI)
    style: PlotStyle | None = field(default=None, compare=False, repr=False)

    @property
    def label(self) -> str:
        """``"sincos (SPE)"``-style: our name, and the paper's where it differs."""
        paper = self.paper_name
        return self.name if paper is None or paper.lower() == self.name else f"{self.name} ({paper})"


def _known(name: str, pe: str, rpt: bool = False, **facts: Any) -> Condition:
    return Condition(name, pe, rpt, **facts)


def _ms(mean: float, std: float) -> MeanStd:
    return MeanStd(mean, std)


# The paper's numbers: ImageNet-100, ViT with 12 blocks, width 384, 8 heads, patch 16 at 224 px, 4 seeds
# (docs/study.md, "Reference numbers"). Conditions the paper did not run have no reference.
_STAYS_NEAR_0 = "stays near 0"
_PEAKS_EARLY = "peaks around 0.5-0.6 by layers 1-2, then declines"
CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        _known("none", "none", paper_name="ablated", paper_checkpoint="ablated", ssdc_note=_STAYS_NEAR_0,
               reference=PaperReference(_ms(0.5682, 0.0056), _ms(0.6458, 0.0119), _ms(0.2984, 0.0085)),
               style=PlotStyle("o", "-", "#000000")),
        _known("ape", "ape", paper_name="APE", paper_checkpoint="ape", ssdc_note=_PEAKS_EARLY,
               reference=PaperReference(_ms(0.6406, 0.0018), _ms(0.4347, 0.0132), _ms(0.1842, 0.0141)),
               # ΔSSDC is reported as 0 for every α <= 0.4; FS at α = 1 is the table's APE JPEG FS.
               alpha_sweep=AlphaSweepReference(
                   4, (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1),
                   (0.47, 0.39, 0.31, 0.18, 0.10, 0.05, 0.0, 0.0, 0.0, 0.0),
                   (0.434, 0.452, 0.478, 0.515, 0.560, 0.598, 0.627, 0.643, 0.648, 0.652)),
               style=PlotStyle("s", "--", "#0072B2")),
        _known("sincos", "sincos", paper_name="SPE", paper_checkpoint="spe", ssdc_note=_PEAKS_EARLY,
               reference=PaperReference(_ms(0.6568, 0.0069), _ms(0.4351, 0.0086), _ms(0.2082, 0.0054)),
               # 1 seed, endpoints only: "ΔSSDC .29 -> .02 smoothly; FS .44 -> .64".
               alpha_sweep=AlphaSweepReference(1, (1.0, 0.1), (0.29, 0.02), (0.44, 0.64)),
               style=PlotStyle("^", "-.", "#D55E00")),
        _known("rope", "rope", paper_name="RoPE", paper_checkpoint="rope", ssdc_note="rises gradually to about 0.35",
               reference=PaperReference(_ms(0.6901, 0.0042), _ms(0.2988, 0.0065), _ms(0.1474, 0.0131)),
               style=PlotStyle("D", ":", "#009E73")),
        _known("rope_mixed", "rope_mixed", paper_name="RoPE-Mixed", style=PlotStyle("v", (0, (6, 2)), "#CC79A7")),
        _known("rpt", "ape", True, paper_name="RPT", paper_checkpoint="rpt", ssdc_note=_STAYS_NEAR_0,
               reference=PaperReference(_ms(0.5595, 0.0054), _ms(0.6297, 0.0038), _ms(0.2427, 0.0123)),
               style=PlotStyle("X", (0, (3, 1, 1, 1, 1, 1)), "#E69F00")),
        _known("peg", "peg", paper_name="PEG", style=PlotStyle("P", (0, (1, 1)), "#56B4E9")),
        _known("relbias", "relbias", paper_name="relative bias", style=PlotStyle("*", (0, (6, 2, 1, 2)), "#7F7F7F")),
    )
}  # fmt: skip

# The paper's five conditions: what `peanchor reproduce` trains by default.
DEFAULT_CONDITIONS: tuple[str, ...] = tuple(name for name, c in CONDITIONS.items() if c.reference is not None)
# The prefix of the paper's released checkpoint files (`ape3_imagenet_100_60`) → our condition.
PAPER_CHECKPOINTS: dict[str, Condition] = {c.paper_checkpoint: c for c in CONDITIONS.values() if c.paper_checkpoint}


@dataclass(frozen=True)
class PaperSetting:
    """Where the paper's reference numbers come from, and how reports label them."""

    label: str
    dataset: str
    img_size: int
    seeds: int
    shifts: dict[str, dict[str, Any]]  # name → Shift description (analysis.shifts.Shift.describe)
    model: str
    citation: str


PAPER = PaperSetting(
    label="paper, ImageNet-100",  # how every reference number is labelled, so that nobody mistakes it for ours
    dataset="ImageNet-100",
    img_size=224,
    seeds=4,
    shifts={"jpeg": {"kind": "jpeg", "quality": 5}, "blur": {"kind": "blur", "kernel_size": 5, "sigma": 2.5}},
    model="ViT with 12 blocks, width 384, 8 heads, patch 16",
    citation="arXiv 2606.00124 (Mannes, 2026)",
)


def condition_name(pe: str, rpt: bool) -> str:
    """The paper's condition label: ``rpt`` is an APE model trained with RPT; others say ``<pe>-rpt``.

    >>> condition_name("ape", True), condition_name("rope", False), condition_name("none", True)
    ('rpt', 'rope', 'none-rpt')
    """
    if not rpt:
        return pe
    return "rpt" if pe == "ape" else f"{pe}-rpt"


def parse_condition(text: str, pe_names: Sequence[str] | None = None) -> Condition:
    """``"ape"`` → APE; ``"rpt"`` → APE with RPT; ``"rope-rpt"`` (or ``"rpt-rope"``) → RoPE with RPT. The PEs are
    the registry's (``pe_names``: a list of them, for a check that loads no torch).

    >>> parse_condition("rpt"), parse_condition("rpt-sincos").name
    (Condition(name='rpt', pe='ape', rpt=True), 'sincos-rpt')
    """
    if pe_names is None:
        from peanchor.pe import PE_NAMES as pe_names

    PE_NAMES = tuple(pe_names)
    name = text.strip().lower()
    if name == "rpt":
        pe, rpt = "ape", True
    elif name.startswith("rpt-"):
        pe, rpt = name[4:], True
    elif name.endswith("-rpt"):
        pe, rpt = name[:-4], True
    else:
        pe, rpt = name, False
    if pe not in PE_NAMES:
        raise ConfigError(
            f"unknown condition {text!r}; expected a positional encoding ({', '.join(PE_NAMES)}), "
            "'rpt' (APE trained with RPT) or '<pe>-rpt'"
            + did_you_mean(name, [*PE_NAMES, "rpt"] if not rpt else [f"{p}-rpt" for p in PE_NAMES])
        )
    canonical = condition_name(pe, rpt)
    return CONDITIONS.get(canonical) or Condition(canonical, pe, rpt)


def parse_conditions(text: str | Sequence[str], pe_names: Sequence[str] | None = None) -> list[Condition]:
    """A comma-separated list (or a sequence) of conditions, duplicates dropped, order kept."""
    items = text.split(",") if isinstance(text, str) else list(text)
    out: list[Condition] = []
    for item in items:
        if item.strip():
            c = parse_condition(item, pe_names)
            if c not in out:
                out.append(c)
    if not out:
        raise ConfigError(f"--conditions {text!r}: expected at least one condition, e.g. none,ape,rope")
    return out


def known(name: str) -> Condition:
    """The condition called ``name``: a known one with its facts, else a bare one (no PE check; for reports)."""
    if name in CONDITIONS:
        return CONDITIONS[name]
    pe, rpt = (name[:-4], True) if name.endswith("-rpt") else (name, False)
    return Condition(name, pe, rpt)


def label(name: str) -> str:
    """The report label of condition ``name`` (see :attr:`Condition.label`).

    >>> label("sincos"), label("rope"), label("rope-rpt")
    ('sincos (SPE)', 'rope', 'rope-rpt')
    """
    return known(name).label


def ordered(names: Iterable[str]) -> list[str]:
    """Distinct condition names in the report order: the known ones first, then the rest sorted.

    >>> ordered(["rpt", "zeta", "none", "rpt"])
    ['none', 'rpt', 'zeta']
    """
    present = set(names)
    first = [c for c in CONDITIONS if c in present]
    return first + sorted(present - set(first))

