"""The names the command line accepts, read from their registries' source without importing them (which loads
torch: seconds), so that a misspelt ``--pe``, ``--model``, ``--data`` or ``--conditions`` is refused at once, in one
line that names the flag and the closest valid value (``--pe 'rop': unknown positional encoding; valid: ... (did
you mean rope?)``).

The names are the PE registry's (``none`` and every ``@register_pe("name")`` in ``peanchor/pe/``, the folder the
registry imports whole), the model sizes (``MODEL_SIZES``' keys) and the datasets (``DATASETS``' keys); a test keeps
them equal to the live registries. The full check still runs later, when the config is built.

Imports: :mod:`peanchor.conditions` (the condition syntax), :mod:`peanchor.errors`.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from peanchor.conditions import parse_conditions
from peanchor.errors import ConfigError, did_you_mean

__all__ = ["check_flags", "dataset_names", "model_names", "pe_names"]

PACKAGE = Path(__file__).resolve().parents[1]


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


@functools.cache
def pe_names() -> tuple[str, ...]:
    """The PE registry's names: those ``PE_REGISTRY`` starts with (``none``), then every PE a module of
    ``peanchor/pe/`` registers, in the order the registry imports them (by module, then place)."""
    names = list(_dict_keys(PACKAGE / "pe" / "registry.py", "PE_REGISTRY"))
    for path in sorted((PACKAGE / "pe").glob("*.py")):
        for node in ast.walk(_parse(path)):
            if isinstance(node, ast.ClassDef | ast.FunctionDef):
                for deco in node.decorator_list:
                    if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "register_pe" and deco.args
                            and isinstance(deco.args[0], ast.Constant)):  # fmt: skip
                        names.append(str(deco.args[0].value))
    return tuple(names)


def _dict_keys(path: Path, name: str) -> tuple[str, ...]:
    for node in _parse(path).body:
        target = node.target if isinstance(node, ast.AnnAssign) else (node.targets[0] if isinstance(node, ast.Assign)
                                                                      else None)  # fmt: skip
        if isinstance(target, ast.Name) and target.id == name and isinstance(node.value, ast.Dict):
            return tuple(str(k.value) for k in node.value.keys if isinstance(k, ast.Constant))
    return ()


@functools.cache
def model_names() -> tuple[str, ...]:
    """``peanchor.models.MODEL_SIZES``' keys."""
    return _dict_keys(PACKAGE / "models" / "args.py", "MODEL_SIZES")


@functools.cache
def dataset_names() -> tuple[str, ...]:
    """``peanchor.data.DATASETS``' keys."""
    return _dict_keys(PACKAGE / "data" / "__init__.py", "DATASETS")


def _check(flag: str, value: Any, what: str, valid: Sequence[str]) -> None:
    if value is None or not valid or value in valid:
        return  # an empty list: the source could not be read; the full check later decides
    raise ConfigError(f"{flag} {value}: unknown {what}; valid: {', '.join(valid)}{did_you_mean(value, valid)}")


def check_flags(args: Any) -> None:
    """The command's ``--pe``, ``--model``, ``--data`` and ``--conditions``, those it has, checked by name."""
    _check("--pe", getattr(args, "pe", None), "positional encoding", pe_names())
    _check("--model", getattr(args, "model", None), "model", model_names())
    _check("--data", getattr(args, "data", None), "dataset", dataset_names())
    conditions = getattr(args, "conditions", None)
    if conditions is not None and pe_names():
        try:
            parse_conditions(conditions, pe_names())
        except ConfigError as e:
            raise ConfigError(f"--conditions: {e}") from None
