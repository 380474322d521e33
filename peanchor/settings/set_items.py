"""The command line's ``--set KEY=VALUE`` items, read once: each becomes a :class:`SetItem` (its key, its value read
as YAML, its text as given) where a command reads its arguments, and is split once by where it goes
(:func:`split_plan_items`: the analysis plan's ``analysis.*`` items, the rest for the training config or the
dataset). Everything below (``peanchor.training.config``'s typed setting, the analysis plan's keys, the dataset's
keys) takes the parsed items and never reads the text again; given text instead (a Python caller), it is parsed here.

The reading sits below the training config and the analysis plan, so that neither climbs to the other to read an
item. :func:`read_yaml` is the one YAML reader of both (config files too): YAML 1.1 as PyYAML reads it, plus
exponent floats without a dot (``3e-4``), as YAML 1.2 reads them.

Imports: nothing else from peanchor; PyYAML.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml

from peanchor.core.errors import ConfigError

__all__ = ["PLAN_PREFIX", "SetItem", "parse_set_item", "parse_set_items", "read_yaml", "split_plan_items"]

#: The prefix of the analysis plan's keys (``--set analysis.rpi_draws=2``).
PLAN_PREFIX = "analysis."


class _Loader(yaml.SafeLoader):
    """YAML 1.1 as PyYAML reads it, plus exponent floats without a dot (``3e-4``, ``1e9``), as YAML 1.2 reads them."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9][0-9_]*)?\.?[0-9_]*[eE][-+]?[0-9]+$"), list("-+0123456789.")
)


def read_yaml(text: str) -> Any:
    """``text`` as YAML, with the float rule of :class:`_Loader`.

    >>> read_yaml("3e-4"), read_yaml("[1, 0.5]"), read_yaml("null")
    (0.0003, [1, 0.5], None)
    """
    return yaml.load(text, Loader=_Loader)  # noqa: S506 (a SafeLoader subclass)


@dataclass(frozen=True)
class SetItem:
    """One ``--set`` item, read: ``key``, ``value`` (YAML; text YAML cannot read stays text, for the type check to
    refuse against the field's type) and ``raw`` (the value's text), with the item's ``text`` as given.

    >>> item = SetItem.parse("optim.lr=3e-4")
    >>> item.key, item.value, item.raw, SetItem.parse(item) is item, SetItem.parse("analysis.seed=1").for_plan
    ('optim.lr', 0.0003, '3e-4', True, True)
    """

    text: str
    key: str
    value: Any
    raw: str

    @classmethod
    def parse(cls, item: str | SetItem) -> SetItem:
        """``item`` read (an item read already is itself); no ``=`` or no key is one :class:`ConfigError` line."""
        if isinstance(item, SetItem):
            return item
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--set {item!r}: expected key=value, e.g. optim.lr=3e-4")
        text = raw.strip()
        if text.startswith("(") and text.endswith(")"):
            text = f"[{text[1:-1]}]"
        try:
            value = read_yaml(text) if text else ""
        except yaml.YAMLError:
            value = raw  # let the type check report it against the field's type
        return cls(item, key, value, raw)

    @property
    def for_plan(self) -> bool:
        """Whether the item sets the analysis plan (``analysis.*``)."""
        return self.key.startswith(PLAN_PREFIX)

    def __str__(self) -> str:
        return self.text


def parse_set_item(item: str | SetItem) -> tuple[str, Any, str]:
    """``"optim.lr=3e-4"`` → ``("optim.lr", 0.0003, "3e-4")``, the value read as YAML (``(a, b)`` as a list)."""
    read = SetItem.parse(item)
    return read.key, read.value, read.raw


def parse_set_items(items: Iterable[str | SetItem]) -> list[SetItem]:
    """Every item read, in the given order (the first bad one is one :class:`ConfigError` line)."""
    return [SetItem.parse(item) for item in items]


def split_plan_items(items: Iterable[str | SetItem]) -> tuple[list[SetItem], list[SetItem]]:
    """``--set`` items → (the others, the ``analysis.*`` ones), each read and in the given order.

    >>> others, plan = split_plan_items(["data.val_size=50", "analysis.rpi_draws=2"])
    >>> [str(i) for i in others], [(i.key, i.value) for i in plan]
    (['data.val_size=50'], [('analysis.rpi_draws', 2)])
    """
    others: list[SetItem] = []
    plan: list[SetItem] = []
    for item in parse_set_items(items):
        (plan if item.for_plan else others).append(item)
    return others, plan
