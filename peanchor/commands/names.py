"""The names the command line accepts, read from their registries' source without importing them (which loads
torch: seconds), so that a misspelt ``--pe``, ``--model``, ``--data`` or ``--conditions`` is refused at once, in one
line that names the flag and the closest valid value (``--pe 'rop': unknown positional encoding; valid: ... (did
you mean rope?)``).

The names are the PE registry's (``none`` and every ``@register_pe`` class in ``peanchor/pe/``, the folder the
registry imports whole, and the plug-ins' that are loaded or declared), the model sizes (``MODEL_SIZES``' keys) and the datasets (``DATASETS``' keys); a test keeps
them equal to the live registries. The full check still runs later, when the config is built.

Imports: :mod:`peanchor.conditions` (the condition syntax), :mod:`peanchor.registry` (entry points, plug-ins),
:mod:`peanchor.errors`.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from peanchor.conditions import parse_conditions
from peanchor.errors import ConfigError, did_you_mean

__all__ = ["check_flags", "dataset_names", "model_names", "pe_names"]

PACKAGE = Path(__file__).resolve().parents[1]


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def _class_name(node: ast.ClassDef) -> str | None:
    """The constant a class body assigns to ``name`` (``name = "ape"`` or ``name: ClassVar[str] = "none"``)."""
    for item in node.body:
        target = item.target if isinstance(item, ast.AnnAssign) else (item.targets[0] if isinstance(item, ast.Assign)
                                                                      and len(item.targets) == 1 else None)  # fmt: skip
        value = getattr(item, "value", None)
        if isinstance(target, ast.Name) and target.id == "name" and isinstance(value, ast.Constant):
            return str(value.value)
    return None


def _registered_pe(node: ast.ClassDef) -> str | None:
    """The name a ``@register_pe`` (or ``@register_pe("name")``) decorator registers ``node`` under, if any."""
    for deco in node.decorator_list:
        func = deco.func if isinstance(deco, ast.Call) else deco
        if getattr(func, "id", getattr(func, "attr", None)) not in ("register_pe", "register"):
            continue
        if isinstance(deco, ast.Call) and deco.args and isinstance(deco.args[0], ast.Constant):
            return str(deco.args[0].value)
        return _class_name(node)
    return None


@functools.cache
def _package_pe_names() -> tuple[str, ...]:
    base = [n for n in ast.walk(_parse(PACKAGE / "pe" / "base.py"))
            if isinstance(n, ast.ClassDef) and n.name == "PositionalEncoding"]  # fmt: skip
    names = [name for name in (_class_name(base[0]) if base else None,) if name]  # "none", registered first
    for path in sorted((PACKAGE / "pe").glob("*.py")):
        names += [name for node in ast.walk(_parse(path)) if isinstance(node, ast.ClassDef)
                  and (name := _registered_pe(node)) is not None]  # fmt: skip
    return tuple(dict.fromkeys(names))


def pe_names() -> tuple[str, ...]:
    """The PE registry's names without importing it: ``none``, every PE a module of ``peanchor/pe/`` registers (in
    the order the registry imports them), the live registry's when a plug-in has loaded it already, and the names
    installed plug-ins declare (``peanchor.pes`` entry points)."""
    from peanchor.registry import entry_point_names

    names = list(_package_pe_names())
    live = sys.modules.get("peanchor.pe.registry")
    names += [n for n in (live.pe_names() if live is not None else ()) if n not in names]
    return tuple(names + [n for n in entry_point_names("peanchor.pes") if n not in names])


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
    return _dict_keys(PACKAGE / "data" / "datasets.py", "DATASETS")


def _check(flag: str, value: Any, what: str, valid: Sequence[str]) -> None:
    if value is None or not valid or value in valid:
        return  # an empty list: the source could not be read; the full check later decides
    raise ConfigError(f"{flag} {value}: unknown {what}; valid: {', '.join(valid)}{did_you_mean(value, valid)}")


def check_flags(args: Any) -> None:
    """The command's ``--pe``, ``--model``, ``--data`` and ``--conditions``, those it has, checked by name; left to
    the full check when ``PEANCHOR_PLUGINS`` names plug-ins (they load when a registry is first read)."""
    from peanchor.registry import plugins_from_env

    if plugins_from_env():
        return
    _check("--pe", getattr(args, "pe", None), "positional encoding", pe_names())
    _check("--model", getattr(args, "model", None), "model", model_names())
    _check("--data", getattr(args, "data", None), "dataset", dataset_names())
    conditions = getattr(args, "conditions", None)
    if conditions is not None and pe_names():
        try:
            parse_conditions(conditions, pe_names())
        except ConfigError as e:
            raise ConfigError(f"--conditions: {e}") from None
