"""Training configuration: nested dataclasses, three presets, and dotted ``--set`` overrides.

A run's config is resolved in layers, the later one winning::

    preset (smoke | cpu | paper)  ←  CLI flags (--pe, --epochs, ...)  ←  --set key=value ...

and the resolved config is written to ``RUN/config.yaml``. Rerunning into the same directory must
resolve to the same config (apart from :data:`RUNTIME_KEYS`, which do not change the result).

Launch examples::

    peanchor train --preset smoke                          # seconds, a sanity check
    peanchor train --preset cpu --pe ape --seed 1          # 32 px scenes on a laptop
    peanchor train --preset paper --data-root /data/imagenet100 --pe rope
    peanchor train --preset cpu --set optim.lr=3e-4 --set model.overrides.depth=6
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from peanchor.conditions import condition_name
from peanchor.data.spec import DataSpec
from peanchor.errors import ConfigError

# Keys that change how a run executes but not what it computes: a rerun may change them.
RUNTIME_KEYS: frozenset[str] = frozenset({"train.num_workers", "train.log_every", "train.eval_batch_size"})

# Architecture overrides accepted by create_model, with their types (model.overrides.<key>).
MODEL_OVERRIDE_TYPES: dict[str, type] = {
    "embed_dim": int,
    "depth": int,
    "num_heads": int,
    "mlp_ratio": float,
    "drop_rate": float,
    "attn_drop_rate": float,
    "drop_path_rate": float,
    "final_norm": bool,
    "norm_eps": float,
    "qkv_bias": bool,
}


@dataclass
class ModelConfig:
    """Which ViT: a registered size, its positional encoding and any architecture overrides."""

    name: str = "vit_tiny"
    pe: str = "none"
    pe_kwargs: dict[str, Any] = field(default_factory=dict)
    patch_size: int | None = None  # None: the size's default
    overrides: dict[str, Any] = field(default_factory=dict)  # keys of MODEL_OVERRIDE_TYPES


@dataclass
class OptimConfig:
    """AdamW with linear warmup then cosine decay, stepped per optimisation step."""

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


@dataclass
class RunConfig:
    """How long and where: epochs, batch, seed, RPT, precision and the device."""

    epochs: int = 10
    batch_size: int = 128  # global: split evenly over DDP processes
    seed: int = 0
    rpt: bool = False  # random permutation of the patch tokens on every training step
    amp: bool = True  # bf16 autocast (CUDA only; CPU always trains in fp32)
    compile: bool = False  # torch.compile the model
    num_workers: int = 0  # DataLoader workers (0: load in the main process)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    eval_batch_size: int = 256
    log_every: int = 50  # steps between progress-bar updates of the running loss


@dataclass
class TrainConfig:
    """Everything a training run depends on; saved as ``RUN/config.yaml``."""

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
# Typed access by dotted key


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_dataclass_type(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp)


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if origin is tuple:
        return "a list [" + ", ".join(_type_name(a) for a in typing.get_args(tp)) + "]"
    if origin in (dict,) or tp is dict:
        return "a mapping {key: value}"
    if origin in (list,) or tp is list:
        return "a list"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, key: str, raw: str | None = None) -> Any:
    """``value`` converted to type ``tp`` or a :class:`ConfigError` naming ``key``.

    ``raw`` is the text the value was parsed from (for ``str`` fields YAML may have turned "1" into 1).
    """
    shown = raw.strip() if raw is not None else repr(value)
    bad = ConfigError(f"{key}={shown}: expected {_type_name(tp)}")
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        nullable = type(None) in options
        if value is None:
            if nullable:
                return None
            raise bad
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, key, raw)
            except ConfigError:
                continue
        if nullable and isinstance(value, str) and value.strip().lower() in ("none", "null", "~"):
            return None
        raise bad
    if tp is Any:
        return value
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise bad
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # YAML 1.1 reads "1e-3" (no dot) as a string
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if tp is str:
        if isinstance(value, str):
            return value
        if raw is not None and isinstance(value, (int, float, bool)):
            return raw.strip()
        raise bad
    if tp is Path:
        if isinstance(value, (str, Path)):
            return str(value)
        raise bad
    if origin is tuple:
        args = typing.get_args(tp)
        if isinstance(value, str):
            value = [v for v in (s.strip() for s in value.strip("()[] ").split(",")) if v]
            value = [yaml.safe_load(v) for v in value]
        if not isinstance(value, (list, tuple)):
            raise bad
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_coerce(v, args[0], key) for v in value)
        if len(value) != len(args):
            raise bad
        return tuple(_coerce(v, a, key) for v, a in zip(value, args))
    if origin is list or tp is list:
        (item,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise bad
        return [_coerce(v, item, key) for v in value]
    if origin is dict or tp is dict:
        if not isinstance(value, dict):
            raise bad
        return {str(k): v for k, v in value.items()}
    if isinstance(value, tp):
        return value
    raise bad


def _valid_keys(cls: type, prefix: str) -> str:
    return ", ".join(f"{prefix}{name}" for name in _hints(cls))


def _check_override(key: str, name: str, value: Any, raw: str | None) -> Any:
    if name not in MODEL_OVERRIDE_TYPES:
        valid = ", ".join(f"model.overrides.{k}" for k in MODEL_OVERRIDE_TYPES)
        raise ConfigError(f"unknown config key {key!r}; valid: {valid}")
    return _coerce(value, MODEL_OVERRIDE_TYPES[name], key, raw)


def set_value(config: TrainConfig, key: str, value: Any, raw: str | None = None) -> None:
    """Set dotted ``key`` (``optim.lr``, ``model.overrides.depth``) on ``config`` after type-checking."""
    parts = key.split(".")
    if not all(parts):
        raise ConfigError(f"bad config key {key!r}: expected dotted names like optim.lr")
    obj: Any = config
    for i, part in enumerate(parts):
        prefix = ".".join(parts[:i])
        prefix = prefix + "." if prefix else ""
        hints = _hints(type(obj))
        if part not in hints:
            raise ConfigError(f"unknown config key {key!r}; valid keys here: {_valid_keys(type(obj), prefix)}")
        tp = hints[part]
        last = i == len(parts) - 1
        if _is_dataclass_type(tp):
            if last:
                raise ConfigError(f"{key} is a section; set one of its keys: {_valid_keys(tp, prefix + part + '.')}")
            obj = getattr(obj, part)
            continue
        if last:
            if key == "model.overrides" and isinstance(value, dict):
                value = {k: _check_override(f"{key}.{k}", k, v, None) for k, v in value.items()}
            setattr(obj, part, _coerce(value, tp, key, raw))
            return
        # One level into a free-form mapping: model.overrides.<arch key>, model.pe_kwargs.<PE option>.
        if (typing.get_origin(tp) is dict or tp is dict) and i == len(parts) - 2:
            mapping = dict(getattr(obj, part))
            name = parts[-1]
            if prefix + part == "model.overrides":
                mapping[name] = _check_override(key, name, value, raw)
            else:
                mapping[name] = value  # the PE validates its own options when the model is built
            setattr(obj, part, mapping)
            return
        raise ConfigError(f"unknown config key {key!r}: {prefix}{part} has no sub-keys")


def parse_set_item(item: str) -> tuple[str, Any, str]:
    """``"optim.lr=3e-4"`` → ``("optim.lr", 0.0003, "3e-4")``, the value read as YAML."""
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {item!r}: expected key=value, e.g. optim.lr=3e-4")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw  # let the type check report it against the field's type
    return key, value, raw


def validate(config: TrainConfig) -> None:
    """Cross-field checks that the type system cannot express."""
    config.data.validate()
    t, o = config.train, config.optim
    positive = {"train.epochs": t.epochs, "train.batch_size": t.batch_size, "train.eval_batch_size": t.eval_batch_size,
                "train.log_every": t.log_every}  # fmt: skip
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
        raise ConfigError(f"model.name={model.name!r}: unknown model; valid: {', '.join(MODEL_SIZES)}")
    if model.pe not in PE_NAMES:
        raise ConfigError(f"model.pe={model.pe!r}: unknown positional encoding; valid: {', '.join(PE_NAMES)}")


def apply_overrides(
    config: TrainConfig, cli_overrides: dict[str, Any] | None = None, set_items: list[str] | None = None
) -> TrainConfig:
    """``config`` with ``cli_overrides`` (dotted key → value; None values are skipped), then ``--set`` items,
    applied in place and validated (the preset layer is :func:`peanchor.presets.resolve_config`).

    >>> apply_overrides(TrainConfig(), {"model.pe": "rope"}, ["optim.lr=3e-4"]).optim.lr
    0.0003
    """
    for key, value in (cli_overrides or {}).items():
        if value is not None:
            set_value(config, key, value)
    for item in set_items or []:
        key, value, raw = parse_set_item(item)
        set_value(config, key, value, raw)
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
    if not isinstance(values, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level")
    config = TrainConfig()
    for key, value in flat_dict(values).items():
        set_value(config, key, value)
    validate(config)
    return config


def to_yaml(config: TrainConfig) -> str:
    return yaml.safe_dump(to_dict(config), sort_keys=False, default_flow_style=False)


def load_config(path: str | Path) -> TrainConfig:
    """Read a ``config.yaml`` written by :func:`to_yaml`."""
    try:
        values = yaml.safe_load(Path(path).read_text())
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e.strerror or e}") from e
    except yaml.YAMLError as e:
        raise ConfigError(f"{path} is not valid YAML: {str(e).splitlines()[0]}") from e
    return from_dict(values, source=str(path))


def diff_configs(old: TrainConfig | dict[str, Any], new: TrainConfig | dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Dotted keys whose values differ (missing on one side shows as ``<unset>``)."""
    a, b = flat_dict(old), flat_dict(new)
    out = {}
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key, "<unset>"), b.get(key, "<unset>")
        if va != vb:
            out[key] = (va, vb)
    return out


__all__ = [
    "MODEL_OVERRIDE_TYPES",
    "apply_overrides",
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
    "set_value",
    "to_dict",
    "to_yaml",
    "validate",
]
