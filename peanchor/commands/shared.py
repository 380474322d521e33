"""What more than one sub-command uses: the ``--shift`` help text (:func:`shift_help`), the lenses' names and
options for the help texts (:func:`lens_list`, :func:`lens_options_help`), the check of the names a command is
given (:func:`check_flags`), and dataset keys set from flags and ``--set``.

:func:`check_flags` reads the registries themselves (the PEs', the model sizes', the datasets'), which list their
names without importing torch (a name's module is imported on its first lookup: :meth:`Registry.register_lazy
<peanchor.core.registry.Registry.register_lazy>`), so that a misspelt ``--pe``, ``--model``, ``--data`` or
``--conditions`` is one line naming the flag and the closest valid value before torch loads.

Imports: :mod:`peanchor.analysis` (the shift registry, light: no torch), :mod:`peanchor.lenses` (the lens registry,
light too), :mod:`peanchor.pe`, :mod:`peanchor.models` and :mod:`peanchor.data` (their registries' names, no torch),
:mod:`peanchor.settings.set_items` (the ``--set`` items, read once); :mod:`peanchor.training` (the typed ``--set``), :mod:`peanchor.data` (the dataset keys) and the analysis
plan (``--set analysis.*``), :mod:`peanchor.settings.conditions` and :mod:`peanchor.study` (reproduce's per-condition items)
when a command runs, all without torch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

from peanchor.analysis.shifts.registry import shift_help
from peanchor.core.errors import ConfigError, did_you_mean
from peanchor.lenses import LENSES
from peanchor.settings.set_items import SetItem, parse_set_items, split_plan_items

# shift_help(): the --shift help, from the registry (no torch), called when a parser is built, so that the kinds of
# the plug-ins loaded by then are in it.
__all__ = ["check_flags", "check_set_items", "lens_descriptions", "lens_list", "lens_names", "lens_options_help", "shift_help",
           "with_data_items"]  # fmt: skip


def lens_options_help() -> str:
    """``analysis.lenses.ssdc.{mode,metric,bootstrap}, ...``: every registered lens's options (plug-ins too), for
    the ``--set`` help of ``analyze`` and ``reproduce``."""
    forms = []
    for name, lens in LENSES.items():
        options = [f.name for f in dataclasses.fields(lens.options_type)]
        if options:
            forms.append(f"analysis.lenses.{name}.{{{','.join(options)}}}")
    return ", ".join(forms)


def lens_names() -> list[str]:
    """The registered lenses' names (the lens registry loads no torch), in report order."""
    return list(LENSES)


def lens_list() -> str:
    """The registered lenses' titles for a help text: ``SSDC, probe R², attention distance and effective rank``."""
    titles = [lens.title for lens in LENSES.values()]
    return ", ".join(titles[:-1]) + (" and " if len(titles) > 1 else "") + titles[-1]


def lens_descriptions() -> str:
    """Each registered lens in a phrase: its title and, in brackets, its key (``--set analysis.lenses``)."""
    return ", ".join(f"{lens.title} ({name})" for name, lens in LENSES.items())


def _check_name(flag: str, value: Any, what: str, valid: Sequence[str]) -> None:
    if value is not None and value not in valid:
        raise ConfigError(f"{flag} {value}: unknown {what}; valid: {', '.join(valid)}{did_you_mean(value, valid)}")


def check_flags(args: Any) -> None:
    """The command's ``--pe``, ``--model``, ``--data`` and ``--conditions``, those it has, checked against their
    registries by name (plug-ins included), without importing torch."""
    from peanchor.settings.conditions import parse_conditions
    from peanchor.data import DATASETS
    from peanchor.models import MODEL_SIZES
    from peanchor.pe import PE_NAMES

    _check_name("--pe", getattr(args, "pe", None), "positional encoding", PE_NAMES)
    _check_name("--model", getattr(args, "model", None), "model", MODEL_SIZES.names())
    _check_name("--data", getattr(args, "data", None), "dataset", DATASETS.names())
    conditions = getattr(args, "conditions", None)
    if conditions is not None:
        try:
            parse_conditions(conditions, tuple(PE_NAMES))
        except ConfigError as e:
            raise ConfigError(f"--conditions: {e}") from None


def check_set_items(items: Iterable[str | SetItem], rest: str, conditions: str | None = None) -> tuple[list[SetItem], list[SetItem]]:
    """The ``--set`` items read once (:mod:`peanchor.settings.set_items`), split once, and checked by key (and value type)
    before the command imports anything heavy (torch): the ``analysis.*`` ones against the analysis plan's keys and
    the lenses' options, the ``rest`` against the training config (``"config"``; with the grid's ``conditions``,
    reproduce's, a ``<condition>:`` prefix is one of them) or the dataset's keys (``"data"``, analyze's). Each fault
    is the line the full check gives later. Returns (the others, the plan's), read, for the command to hand on."""
    from peanchor.analysis.plan import parse_plan_items

    items = parse_set_items(items)
    others, plan_items = split_plan_items(items)
    parse_plan_items(plan_items)
    if rest == "data":
        from peanchor.data.spec import DataSpec

        with_data_items(DataSpec(), {}, others, check_only=True)
    else:
        from peanchor.training.config import check_set_items as check_config_items

        checked: list[Any] = others
        if conditions is not None:
            from peanchor.settings.conditions import parse_conditions
            from peanchor.pe import PE_NAMES
            from peanchor.study.options import split_set_items

            common, per = split_set_items([item.text for item in items], parse_conditions(conditions, tuple(PE_NAMES)))
            checked = [item for item in common if not item.for_plan] + [item for part in per.values() for item in part]
        check_config_items(checked)
    return others, plan_items


def with_data_items(
    spec: Any, flags: dict[str, Any], set_items: Iterable[str | SetItem], check_only: bool = False
) -> Any:
    """``spec`` with dataset keys set, type-checked like ``train --set``: ``flags`` (key → value from the
    command's own options; None is skipped), then the user's ``--set`` items, which may say ``data.key`` or
    ``key``; with ``check_only``, without the cross-field checks (the keys and types of the items alone)."""
    from peanchor.training.config import TrainConfig, set_value

    config = TrainConfig(data=spec)
    for key, value in flags.items():
        if value is not None:
            set_value(config, f"data.{key}", value)
    for item in parse_set_items(set_items):
        key = item.key.removeprefix("data.")
        if not key or "." in key:
            raise ConfigError(f"--set {item.text!r}: expected a dataset key such as val_size or hf_name")
        set_value(config, f"data.{key}", item.value, item.raw)
    if not check_only:
        config.data.validate()
    return config.data
