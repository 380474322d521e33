"""Every preset in one place: the training config it starts from, its analysis defaults, and the shifts its
models are measured under. The CLI's ``--preset`` choices and help come from :data:`PRESETS`, a
:class:`peanchor.core.registry.Registry` (plug-ins add presets with ``PRESETS.register(Preset(...))``).

A run's config is resolved in layers, the later one winning::

    preset (smoke | cpu | paper)  ←  CLI flags (--pe, --epochs, ...)  ←  --set key=value ...

Launch examples::

    peanchor train --preset smoke                          # seconds, a sanity check
    peanchor train --preset cpu --pe ape --seed 1          # 32 px scenes on a laptop
    peanchor train --preset paper --data-root /data/imagenet100 --pe rope
    peanchor reproduce --preset cpu --seeds 3              # every condition, trained, analysed and reported

Imports: :mod:`peanchor.training.config` (the config dataclasses), :mod:`peanchor.settings.set_items` (``--set``), :mod:`peanchor.settings.conditions` (the
paper's shifts), :mod:`peanchor.core.registry`. The config dataclasses are imported inside the functions that build
configs (importing :mod:`peanchor.data` imports torch), so that building the command line from :data:`PRESETS` stays
fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from peanchor.settings.conditions import PAPER
from peanchor.core.registry import NamesView, Registry

if TYPE_CHECKING:  # pragma: no cover
    from peanchor.training.config import TrainConfig

__all__ = [
    "PRESETS",
    "PRESET_NAMES",
    "Preset",
    "get_preset",
    "preset_help",
    "preset_config",
    "named_dataset",
    "preset_shifts",
    "register_preset",
    "resolve_config",
]


@dataclass(frozen=True)
class Preset:
    """A named starting point: training config, analysis defaults, evaluation shifts, seeds per condition."""

    name: str
    summary: str  # one line for --help
    make_config: Callable[[], TrainConfig]
    # The bottom layer of reproduce's analysis plan, by plan key (peanchor.analysis.plan.AnalysisPlan; the rest are
    # the plan's defaults): reproduce --severities and --set analysis.KEY=VALUE override them. Without a
    # batch_size, the run's train.eval_batch_size.
    analysis: Mapping[str, Any]
    # name → Shift description ({"kind": ..., parameters}), at the preset's own resolution.
    shifts: Mapping[str, Mapping[str, Any]]
    seeds: int = 1  # reproduce's default seeds per condition
    parallel_cells: bool = True  # reproduce runs cells in worker processes (--jobs auto: in parallel on CPU)
    # PE name → options for that PE (e.g. the APE's init scale); applied after --pe, before --set.
    pe_kwargs: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # reproduce's default conditions (--conditions); None: the paper's (peanchor.settings.conditions.DEFAULT_CONDITIONS).
    conditions: tuple[str, ...] | None = None

    def config(self) -> TrainConfig:
        """A fresh training config (the caller may change it)."""
        return self.make_config()

    @property
    def img_size(self) -> int:
        """The resolution its shifts are set for (its config's ``data.img_size``)."""
        return self.config().data.img_size


def _smoke() -> TrainConfig:
    from peanchor.data.spec import DataSpec
    from peanchor.training.config import ModelConfig, OptimConfig, RunConfig, TrainConfig

    # Seconds on a laptop: a tiny scenes subset and the test-size model.
    return TrainConfig(
        preset="smoke",
        data=DataSpec(name="scenes", img_size=16, train_size=512, val_size=200),
        model=ModelConfig(name="vit_micro", pe="none", patch_size=4),
        optim=OptimConfig(lr=1e-3, weight_decay=0.05, warmup_epochs=0.5, min_lr=1e-5),
        train=RunConfig(epochs=2, batch_size=64, eval_batch_size=200, num_workers=0),
    )


def _cpu() -> TrainConfig:
    from peanchor.data.spec import DataSpec
    from peanchor.training.config import ModelConfig, OptimConfig, RunConfig, TrainConfig

    # 32 px scenes (v4: textured glyphs on an outdoor layout, docs/scenes.md), a narrow ViT at patch 4 (8 x 8 = 64
    # tokens). Batch 64 leaves the ViT plateau far sooner than 128 for the same compute; learned PE parameters
    # train at 10x the learning rate without weight decay (docs/study.md, "Getting the effect at small scale").
    # 6 epochs (750 steps) is what fits the 10-minute budget of `peanchor reproduce` on 2 cores.
    return TrainConfig(
        preset="cpu",
        data=DataSpec(name="scenes", img_size=32, train_size=8000, val_size=2000),
        model=ModelConfig(
            name="vit_tiny",
            pe="none",
            patch_size=4,
            overrides={"embed_dim": 128, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0, "drop_path_rate": 0.0},
        ),
        optim=OptimConfig(lr=1e-3, weight_decay=0.05, warmup_epochs=0.5, min_lr=1e-5, pe_lr_mult=10.0),
        train=RunConfig(epochs=6, batch_size=64, eval_batch_size=500, num_workers=0),
    )


def _demo() -> TrainConfig:
    import dataclasses

    # The cpu preset's data generator, shifts and recipe with fewer tokens and a smaller budget, so that a first
    # `peanchor reproduce --preset demo` shows something in minutes on 2 cores (docs/study.md, "The demo
    # preset"): patch 8 (a 4 x 4 grid of 16 tokens instead of 64), 3 blocks, 6,000 training images for 6 epochs.
    config = _cpu()
    config.preset = "demo"
    config.data = dataclasses.replace(config.data, train_size=6000, val_size=1000)
    config.model = dataclasses.replace(config.model, patch_size=8, overrides={**config.model.overrides, "depth": 3})
    config.train = dataclasses.replace(config.train, epochs=6)
    return config


def _families() -> TrainConfig:
    # The demo's scale (4 x 4 grid, 3 blocks, 6 epochs), so that eleven conditions fit an evening on 2 cores.
    config = _demo()
    config.preset = "families"
    return config


#: The image sizes of the families preset's analysis at other resolutions: patch grids 2x2, 3x3, 5x5 and 6x6 around
#: its 32 px (4x4) one, half to one and a half times the trained size (docs/families.md, "Other resolutions").
_FAMILY_RESOLUTIONS = (16, 24, 40, 48)
#: The PE families of docs/families.md, with none, ape and rope as the baselines.
FAMILY_CONDITIONS = ("none", "ape", "rope", "fourier", "factorized", "alibi", "liere", "comrope", "string", "rope_ape",
                     "rope_dinov3")  # fmt: skip


def _paper() -> TrainConfig:
    from peanchor.data.spec import DataSpec
    from peanchor.training.config import ModelConfig, OptimConfig, RunConfig, TrainConfig

    # The paper's setup (docs/study.md); schedule, smoothing and augmentation are our choices (ibid.). The paper
    # states AdamW with weight decay 0.05 and no exclusions, and no gradient clipping: every parameter is decayed
    # (PE table, norms, biases and CLS too: a plain AdamW over the model) and nothing is clipped.
    return TrainConfig(
        preset="paper",
        data=DataSpec(name="imagenet100", img_size=224, augment="rrc_flip"),
        model=ModelConfig(name="vit_paper", pe="ape", patch_size=16),
        optim=OptimConfig(
            lr=1e-3, weight_decay=0.05, betas=(0.9, 0.999), warmup_epochs=5.0, min_lr=1e-5,
            label_smoothing=0.1, clip_grad=None, pe_weight_decay=0.05, decay_norms_biases=True,
        ),
        train=RunConfig(epochs=60, batch_size=128, amp=True, num_workers=8, eval_batch_size=256, log_every=100),
    )  # fmt: skip


# At <= 48 px the paper's JPEG q5 / blur σ 2.5 push every model to chance. The smoke preset measures under the
# CIFAR-10-C severity-3 values (JPEG 58, σ 0.7 with the skimage-rule kernel 7).
_CIFAR_C_SEVERITY_3: dict[str, dict[str, Any]] = {
    "jpeg": {"kind": "jpeg", "quality": 58},
    "blur": {"kind": "blur", "kernel_size": 7, "sigma": 0.7},
}
# The cpu preset fixes its own shifts once, the same for every condition and seed: as disruptive as the paper's,
# i.e. the ablated model loses 30-70 % of its accuracy (the paper's lost 65 % to JPEG and 30 % to blur). On scenes
# v4 the CIFAR-10-C severity-3 values cost it under 15 %; JPEG q10 and blur σ 1.0 (kernel 9, the skimage rule) put
# it in range (docs/scenes.md, "Calibration"). The severity sweep shows the whole curve.
_CPU_SHIFTS: dict[str, dict[str, Any]] = {
    "jpeg": {"kind": "jpeg", "quality": 10},
    "blur": {"kind": "blur", "kernel_size": 9, "sigma": 1.0},
}
# The APE's init at this budget: the paper's N(0, 1) swamps the patch content of a width-128 model, timm's 0.02
# leaves a table that starts smooth (layer 0 is then the most geometric layer and the model leans on texture);
# 0.2 learns at once and leaves the first block something to build (docs/scenes.md, "Calibration").
_CPU_PE_KWARGS: dict[str, dict[str, Any]] = {"ape": {"init_std": 0.2}}

# The α grid is the cost driver: each α ≠ 1 costs 1 + (number of shifts) full passes and one two-block pass per RPI
# draw. cpu takes 5 points of the paper's grid (1.0, 0.9, ..., 0.1). RPI draws one permutation per forward call, so
# the batch size sets how many permutations SSDC under RPI averages over: 20 per draw for cpu (2000 / 100), about
# 20 for paper (5000 / 256), 8 for smoke, 40 for demo (1000 / 25): on its 4 x 4 grid, 10 permutations (batch 100)
# left SSDC under RPI moving by up to 0.13 between two draws, wider than the ghost-map claim's band (docs/study.md).
PRESETS: Registry[Preset] = Registry("preset", "peanchor.presets.catalog")
for _preset in (
    Preset("smoke", "seconds, a sanity check", _smoke, {"alphas": (1.0, 0.5, 0.0), "batch_size": 25},
           _CIFAR_C_SEVERITY_3, parallel_cells=False),  # one cell takes a second: worker start-up would dominate
    Preset("cpu", "32 px scenes on 2 CPU cores (the default)", _cpu,
           {"alphas": (1.0, 0.8, 0.6, 0.4, 0.2), "rpi_draws": 2, "batch_size": 100, "severities": True},
           _CPU_SHIFTS, pe_kwargs=_CPU_PE_KWARGS),
    Preset("demo", "a first look: 4 conditions in about 2 minutes on 2 CPU cores", _demo,
           {"alphas": (1.0, 0.5, 0.0), "rpi_draws": 1, "batch_size": 25, "severities": False},
           _CPU_SHIFTS, pe_kwargs=_CPU_PE_KWARGS, conditions=("none", "ape", "rope", "rpt")),
    Preset("families", "the PE families against none, ape and rope, at the demo's scale (docs/families.md)",
           _families, {"alphas": (1.0, 0.5, 0.0), "rpi_draws": 1, "batch_size": 25, "severities": False,
                       "resolutions": _FAMILY_RESOLUTIONS},
           _CPU_SHIFTS, seeds=2, pe_kwargs=_CPU_PE_KWARGS, conditions=FAMILY_CONDITIONS),
    Preset("paper", "ImageNet-100 as in the paper", _paper,
           {"alphas": (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0)}, PAPER.shifts, seeds=4),
):  # fmt: skip
    PRESETS.register(_preset)
#: The preset names, built-ins and plug-ins (entry-point group ``peanchor.presets.catalog``); a live view.
PRESET_NAMES = NamesView(PRESETS)


def register_preset(preset: Preset) -> Preset:
    """The older spelling of ``PRESETS.register(preset)``: a preset of one's own (the name must be new)."""
    if not isinstance(preset, Preset):
        raise TypeError(f"register_preset takes a Preset, got {preset!r}")
    return PRESETS.register(preset)


def get_preset(name: str) -> Preset:
    """The preset called ``name``, or a :class:`ConfigError` listing the valid ones."""
    return PRESETS.lookup(name)


def preset_config(name: str) -> TrainConfig:
    """A fresh :class:`TrainConfig` for preset ``name``."""
    return get_preset(name).config()


def preset_help() -> str:
    """``"smoke: seconds, a sanity check; cpu: ...; paper: ..."`` for the CLI."""
    return "; ".join(f"{p.name}: {p.summary}" for p in PRESETS.values())


def preset_shifts(preset: str | None, img_size: int) -> tuple[str, dict[str, dict[str, Any]]] | None:
    """``(preset, its shift descriptions)`` for a model of ``preset`` at ``img_size`` px, as
    :func:`peanchor.analysis.shift_specs.measured_shifts` takes them.

    A preset's shifts are fixed for its own resolution, so a run resized away from it (``--img-size``) and a
    model without a known preset (a timm model, a foreign run) get None: the caller then falls back to the
    resolution rule :func:`peanchor.analysis.shifts.paper_shifts`.

    >>> preset_shifts("cpu", 32)[1]["jpeg"], preset_shifts("cpu", 64), preset_shifts(None, 32)
    ({'kind': 'jpeg', 'quality': 10}, None, None)
    """
    if preset not in PRESETS:
        return None
    p = PRESETS[preset]
    if p.img_size != img_size:
        return None
    return preset, {name: dict(spec) for name, spec in p.shifts.items()}


def resolve_config(
    preset: str, cli_overrides: dict[str, Any] | None = None, set_items: list[str] | None = None
) -> TrainConfig:
    """The preset, then ``cli_overrides`` (dotted key → value; None values are skipped), then ``--set`` items.

    A dataset other than the preset's (``--data``, or ``--set data.name=...``) replaces the preset's data section
    before anything else is applied (:meth:`~peanchor.data.spec.DataSpec.for_dataset`): the preset's split sizes
    (the smoke and cpu presets generate 512 or 8,000 scenes) say nothing about another dataset, which is used
    whole unless ``--set data.train_size=N`` / ``data.val_size=N`` asks for a subset. ``train``, ``reproduce``
    and (through the run's config) ``analyze`` all resolve their data here.

    >>> cfg = resolve_config("smoke", {"model.pe": "rope", "train.seed": 3}, ["optim.lr=3e-4"])
    >>> cfg.model.pe, cfg.train.seed, cfg.optim.lr
    ('rope', 3, 0.0003)
    >>> cfg = resolve_config("smoke", {"data.name": "imagefolder"}, ["data.val_size=50"])
    >>> cfg.data.train_size, cfg.data.val_size, cfg.data.img_size
    (None, 50, 16)
    """
    from peanchor.training.config import apply_overrides

    config = preset_config(preset)
    name = named_dataset(cli_overrides, set_items)
    if name is not None:
        config.data = config.data.for_dataset(name)
    config = apply_overrides(config, cli_overrides)
    defaults = get_preset(preset).pe_kwargs.get(config.model.pe, {})
    config.model.pe_kwargs = {**defaults, **config.model.pe_kwargs}
    return apply_overrides(config, None, set_items)


def named_dataset(cli_overrides: Mapping[str, Any] | None, set_items: list[str] | None) -> str | None:
    """The dataset the command line names, if any: ``--set data.name=X`` (the last one) over ``--data X``.

    >>> named_dataset({"data.name": "cifar10"}, ["optim.lr=1e-3"]), named_dataset(None, ["data.name=hf"])
    ('cifar10', 'hf')
    """
    from peanchor.settings.set_items import parse_set_item

    name = (cli_overrides or {}).get("data.name")
    for item in set_items or []:
        key, value, raw = parse_set_item(item)
        if key == "data.name":
            name = value if isinstance(value, str) else raw.strip()
    return name
