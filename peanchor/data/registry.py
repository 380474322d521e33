"""The datasets by name: :data:`DATASETS`, a :class:`peanchor.core.registry.Registry` of builders (plug-ins from the
entry-point group ``peanchor.datasets``). A builder is ``(DataSpec, train: bool) -> (train set or None, val set,
DataInfo)``, registered with its name: ``@DATASETS.register(name="my_data")``.

The built-in names are listed here with the module that registers them, without importing it (the builders load
torch): the command line checks a ``--data`` against the registry itself before torch loads.

Imports: :mod:`peanchor.core.registry`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from peanchor.core.registry import Registry

__all__ = ["BUILT_IN", "DATASETS"]

#: The built-in datasets, in the registry's order: name → where its builder is registered.
BUILT_IN: dict[str, str] = {
    "scenes": "peanchor.data.datasets", "imagefolder": "peanchor.data.datasets", "cifar10": "peanchor.data.datasets",
    "cifar100": "peanchor.data.datasets", "imagenet100": "peanchor.data.datasets", "hf": "peanchor.data.datasets",
    "prepared": "peanchor.data.prepared:build_prepared",
}  # fmt: skip

DATASETS: Registry[Callable[..., Any]] = Registry("dataset", "peanchor.datasets")
for _name, _module in BUILT_IN.items():
    DATASETS.register_lazy(_name, _module)
