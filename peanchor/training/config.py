"""Training configuration: nested dataclasses, and dotted ``--set`` overrides checked by pydantic.

A run's config is a :class:`TrainConfig`: a preset's (:mod:`peanchor.presets.catalog`), then CLI flags, then
``--set key=value`` items (:func:`apply_overrides`). The resolved config is written to ``RUN/config.yaml``;
rerunning into the same directory must resolve to the same config (apart from :data:`RUNTIME_KEYS`, which do
not change the result).

``--set`` values are read as YAML once, by :mod:`peanchor.settings.set_items` (``3e-4`` and ``1e9`` are floats, ``null`` is
None, ``[0.9, 0.95]`` a list; the functions here take the items read or their text) and
the whole config is then validated by a pydantic ``TypeAdapter`` over these dataclasses in strict mode, so that a
wrong type or an unknown key is one line naming the dotted key, what was given and what was expected::

    peanchor train --preset cpu --set optim.lr=3e-4 --set model.overrides.depth=6

Imports: :mod:`peanchor.data.spec`, :mod:`peanchor.settings.conditions`, :mod:`peanchor.models.args`, :mod:`peanchor.settings.set_items`
(reading ``--set`` items and YAML), :mod:`peanchor.pe` (lazily, to check a PE name); pydantic lazily (on the first
override).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml
from typing_extensions import TypedDict, is_typeddict  # pydantic needs typing_extensions' TypedDict before Python 3.12

from peanchor.settings.conditions import condition_name
from peanchor.data.spec import PATH_FIELDS, DataSpec, resolved_path
from peanchor.core.errors import ConfigError, did_you_mean
from peanchor.models.args import Architecture, field_types
from peanchor.settings.set_items import SetItem, parse_set_item, parse_set_items, read_yaml

# Keys that change how a run executes but not what it computes: a rerun may change them.
# ``train.device`` may change (cuda:0 → cuda:1, auto → cuda) as long as the device *type* stays: a resume that
# would move a run between CPU and GPU is refused by the loop (the CPU run's exactness claim would not hold).
RUNTIME_KEYS: frozenset[str] = frozenset(
    {"train.num_workers", "train.log_every", "train.eval_batch_size", "train.checkpoint_every", "train.device"}
)

# Every section refuses unknown keys when pydantic validates it (set_value, from_dict).
_FORBID_EXTRA = {"extra": "forbid"}


# Architecture overrides accepted by create_model (``model.overrides.<key>``), with their types: the fields of
# peanchor.models.args.Architecture, the one place they are spelled.
ModelOverrides = TypedDict("ModelOverrides", field_types(Architecture), total=False)  # type: ignore[misc]
ModelOverrides.__pydantic_config__ = _FORBID_EXTRA  # type: ignore[attr-defined]


@dataclass
class ModelConfig:
    """Which ViT: a registered size, its positional encoding and any architecture overrides."""

    __pydantic_config__ = _FORBID_EXTRA
    name: str = "vit_tiny"
    pe: str = "none"
    pe_kwargs: dict[str, Any] = field(default_factory=dict)  # free-form: the PE checks its own options
    patch_size: int | None = None  # None: the size's default
    overrides: ModelOverrides = field(default_factory=lambda: ModelOverrides())


@dataclass
class OptimConfig:
    """AdamW with linear warmup then cosine decay, stepped per optimisation step."""

    __pydantic_config__ = _FORBID_EXTRA

    lr: float = 1e-3
    weight_decay: float = 0.05
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    warmup_epochs: float = 1.0
    min_lr: float = 1e-5
    label_smoothing: float = 0.1
    clip_grad: float | None = 1.0  # max global grad norm; None: no clipping
    pe_lr_mult: float = 1.0  # PE parameters (model.pe.*) train at pe_lr_mult × lr
    pe_weight_decay: float = 0.0  # ... with this weight decay
    decay_norms_biases: bool = False  # True: norms, biases and the CLS token get weight_decay too (plain AdamW)


@dataclass
class RunConfig:
    """How long and where: epochs, batch, seed, RPT, precision and the device."""

    __pydantic_config__ = _FORBID_EXTRA

    epochs: int = 10
    batch_size: int = 128  # global: split evenly over DDP processes
    seed: int = 0
    rpt: bool = False  # random permutation of the patch tokens on every training step
    amp: bool = True  # bf16 autocast (CUDA only; CPU always trains in fp32)
    compile: bool = False  # torch.compile the training step (normalise, forward, loss; backward through AOTAutograd)
    tf32: bool = True  # CUDA only: TF32 tensor cores for the float32 matmuls/convolutions (CPU unaffected)
    num_workers: int = 0  # DataLoader workers (0: load in the main process); persistent, pinned on CUDA
    device: str = "auto"  # auto | cpu | cuda | cuda:N (under torchrun: auto or cuda, each rank its LOCAL_RANK GPU)
    eval_batch_size: int = 256
    log_every: int = 50  # steps between reads of the running loss/accuracy (the only host syncs of a step)
    checkpoint_every: int | None = None  # also save the resume state every N steps; None: at epoch ends only


@dataclass
class TrainConfig:
    """Everything a training run depends on; saved as ``RUN/config.yaml``."""

    __pydantic_config__ = _FORBID_EXTRA

    preset: str = "cpu"
    data: DataSpec = field(default_factory=DataSpec)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: RunConfig = field(default_factory=RunConfig)

    @property
    def condition(self) -> str:
        return condition_name(self.model.pe, self.train.rpt)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def to_yaml(self) -> str:
        return to_yaml(self)


# ----------------------------------------------------------------------------------------------
# Typed access by dotted key: pydantic validates the whole config after each change


@functools.cache
def _adapter() -> Any:  # pydantic.TypeAdapter[TrainConfig], built on first use (pydantic is imported lazily)
    from pydantic import TypeAdapter

    return TypeAdapter(TrainConfig)


def _validate(tree: dict[str, Any]) -> TrainConfig:
    # Strict JSON mode: an int field takes an integer (not true, not 1.5), a float an integer or a float, a
    # tuple a list of the right length; with unknown keys refused (__pydantic_config__ on every section).
    return _adapter().validate_json(json.dumps(tree), strict=True)


def _section_fields(tp: Any) -> dict[str, Any] | None:
    """Field name → annotation of a config section (a dataclass or a TypedDict), None for a leaf."""
    if isinstance(tp, type) and (dataclasses.is_dataclass(tp) or is_typeddict(tp)):
        return typing.get_type_hints(tp)
    return None


def _annotation_at(loc: tuple[Any, ...]) -> tuple[list[str], Any]:
    """The dotted path of ``loc`` down to the deepest config field it names, and that field's annotation."""
    path: list[str] = []
    tp: Any = TrainConfig
    for part in loc:
        fields = _section_fields(tp)
        if fields is None or part not in fields:
            break
        path.append(str(part))
        tp = fields[part]
    return path, tp


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "a list [" + ", ".join(_type_name(a) for a in typing.get_args(tp)) + "]"
    if origin is dict or tp is dict or is_typeddict(tp):
        return "a mapping {key: value}"
    return getattr(tp, "__name__", str(tp))


def _valid_keys(tp: Any, prefix: list[str]) -> str:
    return ", ".join(".".join([*prefix, name]) for name in _section_fields(tp) or {})


def _config_error(error: Any, key: str, shown: str) -> ConfigError:
    """pydantic's first error as one line naming the dotted key, in peanchor's words."""
    first = error.errors()[0]
    loc = tuple(first["loc"])
    path, tp = _annotation_at(loc)
    if first["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
        _, section = _annotation_at(loc[:-1])
        valid = _valid_keys(section, path)
        return ConfigError(f"unknown config key {key!r}; valid keys here: {valid}"
                           + did_you_mean(key, valid.split(", ")))  # fmt: skip
    where = ".".join(path) or key
    if _section_fields(tp) is not None and not is_typeddict(tp):
        return ConfigError(f"{where} is a section; set one of its keys: {_valid_keys(tp, path)}")
    shown = shown if where == key else repr(first.get("input"))
    return ConfigError(f"{where}={shown}: expected {_type_name(tp)}")


def _with_value(tree: dict[str, Any], parts: list[str], value: Any) -> dict[str, Any]:
    """A copy of the nested dict ``tree`` with ``value`` at ``parts`` (missing sections are created)."""
    out = dict(tree)
    node = out
    for i, part in enumerate(parts[:-1]):
        child = node.get(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"unknown config key {'.'.join(parts)!r}: {'.'.join(parts[: i + 1])} has no sub-keys")
        node[part] = dict(child)
        node = node[part]
    node[parts[-1]] = value
    return out


def set_value(config: TrainConfig, key: str, value: Any, raw: str | None = None) -> None:
    """Set dotted ``key`` (``optim.lr``, ``model.overrides.depth``) on ``config`` in place, type-checked.

    ``raw`` is the text ``value`` was parsed from (``--set``): a ``str`` field keeps that text when YAML made a
    number or a boolean of it (``data.root=123``), and ``none`` means null where null is allowed.
    """
    from pydantic import ValidationError

    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"bad config key {key!r}: expected dotted names like optim.lr")
    tree = to_dict(config)
    candidates = [value]
    if raw is not None and isinstance(value, (bool, int, float)):
        candidates.append(raw.strip())
    if raw is not None and raw.strip().lower() == "none":
        candidates.append(None)
    first_error = None
    for candidate in candidates:
        try:
            new = _validate(_with_value(tree, parts, candidate))
        except ValidationError as e:
            first_error = first_error or e
            continue
        for f in dataclasses.fields(config):
            setattr(config, f.name, getattr(new, f.name))
        return
    raise _config_error(first_error, key, raw.strip() if raw is not None else repr(value))


def check_set_items(items: Iterable[str | SetItem]) -> None:
    """Each ``--set`` item's key and the type of its value checked on a default config, in the words of
    :func:`set_value`: a command calls this first, so that a misspelt key (``model.pee``) is one line before torch
    loads; the cross-field checks (:func:`validate`, a PE's name) wait for the command's own config.

    >>> check_set_items(["optim.lr=3e-4", "model.overrides.depth=6"])
    >>> check_set_items(["optim.lrr=1"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    peanchor.core.errors.ConfigError: unknown config key 'optim.lrr'; valid keys here: optim.lr, ... (did you mean optim.lr?)
    """
    config = TrainConfig()
    for item in parse_set_items(items):
        set_value(config, item.key, item.value, item.raw)


def validate(config: TrainConfig) -> None:
    """Cross-field checks that the type system cannot express."""
    config.data.validate()
    t, o = config.train, config.optim
    positive = {"train.epochs": t.epochs, "train.batch_size": t.batch_size, "train.eval_batch_size": t.eval_batch_size,
                "train.log_every": t.log_every}  # fmt: skip
    if t.checkpoint_every is not None:
        positive["train.checkpoint_every"] = t.checkpoint_every
    for key, value in positive.items():
        if value < 1:
            raise ConfigError(f"{key}={value}: expected a positive integer")
    if t.num_workers < 0:
        raise ConfigError(f"train.num_workers={t.num_workers}: expected >= 0")
    if t.seed < 0:
        raise ConfigError(f"train.seed={t.seed}: expected a non-negative integer")
    if not (t.device in ("auto", "cpu", "cuda", "mps") or t.device.startswith("cuda:")):
        raise ConfigError(f"train.device={t.device!r}: expected auto, cpu, cuda, cuda:N or mps")
    if o.lr <= 0 or o.min_lr < 0:
        raise ConfigError(f"optim.lr={o.lr}, optim.min_lr={o.min_lr}: expected lr > 0 and min_lr >= 0")
    if o.warmup_epochs < 0:
        raise ConfigError(f"optim.warmup_epochs={o.warmup_epochs}: expected >= 0")
    if not 0.0 <= o.label_smoothing < 1.0:
        raise ConfigError(f"optim.label_smoothing={o.label_smoothing}: expected a value in [0, 1)")
    if o.clip_grad is not None and o.clip_grad <= 0:
        raise ConfigError(f"optim.clip_grad={o.clip_grad}: expected a positive max norm, or null for no clipping")
    if not all(0.0 <= b < 1.0 for b in o.betas):
        raise ConfigError(f"optim.betas={list(o.betas)}: expected two values in [0, 1)")
    if o.pe_lr_mult < 0 or o.weight_decay < 0 or o.pe_weight_decay < 0:
        raise ConfigError("optim.pe_lr_mult, optim.weight_decay and optim.pe_weight_decay must be >= 0")
    _check_names(config.model)


def _check_names(model: ModelConfig) -> None:
    from peanchor.models import MODEL_SIZES
    from peanchor.pe import PE_NAMES

    if model.name not in MODEL_SIZES:
        raise ConfigError(f"model.name={model.name!r}: unknown model; valid: {', '.join(MODEL_SIZES)}"
                          + did_you_mean(model.name, MODEL_SIZES))  # fmt: skip
    if model.pe not in PE_NAMES:
        raise ConfigError(f"model.pe={model.pe!r}: unknown positional encoding; valid: {', '.join(PE_NAMES)}"
                          + did_you_mean(model.pe, PE_NAMES))  # fmt: skip


def apply_overrides(
    config: TrainConfig, cli_overrides: dict[str, Any] | None = None,
    set_items: Iterable[str | SetItem] | None = None,
) -> TrainConfig:
    """``config`` with ``cli_overrides`` (dotted key → value; None values are skipped), then ``--set`` items,
    applied in place and validated (the preset layer is :func:`peanchor.presets.catalog.resolve_config`).

    >>> apply_overrides(TrainConfig(), {"model.pe": "rope"}, ["optim.lr=3e-4"]).optim.lr
    0.0003
    """
    for key, value in (cli_overrides or {}).items():
        if value is not None:
            set_value(config, key, value)
    for item in parse_set_items(set_items or ()):  # read already where a command took them (peanchor.settings.set_items)
        set_value(config, item.key, item.value, item.raw)
    validate(config)
    return config


# ----------------------------------------------------------------------------------------------
# Serialisation


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Path):
        return str(value)
    return value


def to_dict(config: TrainConfig) -> dict[str, Any]:
    """Plain JSON/YAML-able nested dict (tuples become lists)."""
    return _plain(config)


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and k not in ("pe_kwargs", "overrides"):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def flat_dict(config: TrainConfig | dict[str, Any]) -> dict[str, Any]:
    """``{"optim.lr": 0.001, ..., "model.overrides": {...}}``: one entry per leaf field."""
    return _flatten(config if isinstance(config, dict) else to_dict(config))


def from_dict(values: dict[str, Any], *, source: str = "config") -> TrainConfig:
    """Rebuild a :class:`TrainConfig` from :func:`to_dict` output, type-checking every field."""
    from pydantic import ValidationError

    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    try:
        config = _validate(values)
    except ValidationError as e:
        raise ConfigError(f"{source}: {_config_error(e, '', '')}") from None
    validate(config)
    return config


def to_yaml(config: TrainConfig) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False, default_flow_style=False)


def load_config(path: str | Path) -> TrainConfig:
    """Read a ``config.yaml`` written by :func:`to_yaml`."""
    try:
        values = read_yaml(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from e
    return from_dict(values, source=str(path))


def diff_configs(old: TrainConfig | dict[str, Any], new: TrainConfig | dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ (missing on one side shows as ``<unset>``); the data's paths are compared
    as the files they name (:data:`peanchor.data.spec.PATH_FIELDS`), so ``in100p`` and its absolute path agree."""
    a, b = flat_dict(old), flat_dict(new)
    paths = {f"data.{name}" for name in PATH_FIELDS}
    out = {}
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, "<unset>"), b.get(key, "<unset>")
        if va != vb and not (key in paths and resolved_path(va) == resolved_path(vb)):
            out[key] = (va, vb)
    return out


__all__ = [
    "ModelOverrides",
    "apply_overrides",
    "check_set_items",
    "RUNTIME_KEYS",
    "ModelConfig",
    "OptimConfig",
    "RunConfig",
    "TrainConfig",
    "diff_configs",
    "flat_dict",
    "from_dict",
    "load_config",
    "parse_set_item",
    "read_yaml",
    "set_value",
    "to_dict",
    "to_yaml",
    "validate",
]
