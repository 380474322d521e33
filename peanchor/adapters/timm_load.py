"""Building timm models offline and reading their weights: :func:`load_timm_model` (a timm name, local weights) and
the provenance of a model built elsewhere (:func:`describe`). The model is wrapped by whichever registered backend
accepts it (:mod:`peanchor.adapters.backend`): a ViT or Eva by :class:`~peanchor.adapters.timm_vit.TimmViT`, a BEiT
by :class:`~peanchor.adapters.timm_beit.TimmBeit`.

timm is imported lazily: this module imports without it, and every entry point raises
``PeanchorError("timm is not installed: ...")`` when it is missing.

Imports: torch, timm (lazily); :mod:`peanchor.adapters` (backend), :mod:`peanchor.checkpoint.weights`.
"""

from __future__ import annotations

import difflib
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from torch import Tensor, nn

from peanchor.adapters.backend import require_library
from peanchor.core.errors import CheckpointError, ConfigError
from peanchor.checkpoint.weights import load_strict
from peanchor.checkpoint.weights import read_state_dict as read_weights_file

__all__ = ["WEIGHT_SUFFIXES", "describe", "load_timm_model", "read_state_dict", "require_timm"]

WEIGHT_SUFFIXES = (".safetensors", ".pt", ".pth", ".bin")
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def require_timm() -> Any:
    """The ``timm`` module, or a PeanchorError saying how to install it."""
    return require_library("timm", "timm")


@contextmanager
def _hub_offline() -> Iterator[None]:
    """Belt and braces around timm: nothing here may reach the Hugging Face Hub.

    We always pass ``pretrained=False``, so timm never asks for weights; the variables only guard
    against a future code path that would. They are restored afterwards. Note that
    ``huggingface_hub`` reads them once, when it is first imported: if that first import happens
    inside this block (``import timm`` imports it), the hub stays offline for the process.
    """
    saved = {k: os.environ.get(k) for k in _OFFLINE_VARS}
    os.environ.update({k: "1" for k in _OFFLINE_VARS})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _jsonable(value: Any) -> Any:
    try:
        return json.dumps(value) and value
    except (TypeError, ValueError):
        return [_jsonable(v) for v in value] if isinstance(value, (tuple, list)) else repr(value)


def _size_arg(model: nn.Module) -> int | list[int] | None:
    """The model's input size as ``create_model(img_size=...)`` takes it: an int when square (None: no patch
    embedding, a model :class:`TimmViT` then refuses with the classes it supports)."""
    if not hasattr(model, "patch_embed"):
        return None
    rows, cols = (int(s) for s in model.patch_embed.img_size)
    return rows if rows == cols else [rows, cols]


def describe(model: nn.Module, timm_version: str) -> dict[str, Any]:
    """Provenance of a model that was not built by :func:`load_timm_model`."""
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return {
        "source": "timm", "name": cfg.get("architecture", type(model).__name__), "weights": None,
        "num_classes": int(getattr(model, "num_classes", 0)), "img_size": _size_arg(model), "kwargs": {},
        "timm_version": timm_version,
    }  # fmt: skip


def read_state_dict(path: str | os.PathLike[str]) -> dict[str, Tensor]:
    """The tensors of a local timm weights file (:data:`WEIGHT_SUFFIXES`), bare or nested; nothing but tensors
    and containers is unpickled (see :func:`peanchor.checkpoint.weights.read_state_dict`)."""
    p = Path(path)
    if p.exists() and p.suffix.lower() not in WEIGHT_SUFFIXES:
        raise CheckpointError(f"{p}: unknown weights format {p.suffix!r}; expected one of {', '.join(WEIGHT_SUFFIXES)}")
    return read_weights_file(p)


def load_timm_model(
    name: str,
    *,
    weights: str | os.PathLike[str] | None = None,
    num_classes: int | None = None,
    img_size: int | None = None,
    **kwargs: Any,
) -> Any:
    """Build timm model ``name`` (never downloading), load local ``weights`` and wrap it.

    ``num_classes`` defaults to the rows of ``head.weight`` in ``weights`` (else timm's default); ``img_size`` and
    ``kwargs`` (e.g. ``depth``, ``embed_dim``, ``pos_embed='none'``) go to ``timm.create_model``. Weights load
    strictly: a missing file, an unsafe pickle, or keys/shapes that do not fit raise :class:`CheckpointError`.

    Returns:
        The :class:`~peanchor.adapters.timm_vit.TimmViT` wrapping the model, in eval mode.

    Examples:
        ```python
        m = load_timm_model("vit_small_patch16_rope_mixed_224", img_size=32, patch_size=8, depth=2, num_classes=10)
        ```
    """
    with _hub_offline():
        timm = require_timm()
        if not timm.is_model(name):
            close = difflib.get_close_matches(name, timm.list_models(), n=5, cutoff=0.6)
            raise ConfigError(
                f"unknown timm model {name!r}" + (f"; did you mean {', '.join(close)}?" if close else "")
            )
        sd = path = None
        if weights is not None:
            path = Path(weights)
            sd = read_state_dict(path)
            if num_classes is None and "head.weight" in sd and sd["head.weight"].dim() == 2:
                num_classes = int(sd["head.weight"].shape[0])
        create_kwargs = dict(kwargs)
        if num_classes is not None:
            create_kwargs["num_classes"] = num_classes
        if img_size is not None:
            create_kwargs["img_size"] = img_size
        try:
            model = timm.create_model(name, pretrained=False, **create_kwargs)
        except (TypeError, ValueError, AssertionError) as e:
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ConfigError(f"timm model {name!r} rejected its arguments: {first}") from e
    model_args = {
        "source": "timm",
        "name": name,
        "weights": str(path) if path is not None else None,
        "num_classes": int(getattr(model, "num_classes", num_classes or 0)),
        "img_size": _size_arg(model),
        "kwargs": {k: _jsonable(v) for k, v in kwargs.items()},
        "timm_version": timm.__version__,
    }
    from peanchor.adapters.backend import wrap_model

    wrapped = wrap_model(model, model_args=model_args)
    if sd is not None:
        headless = "head.weight" in model.state_dict() and not any(k.startswith("head.") for k in sd)
        hint = " (a headless checkpoint: pass num_classes=0)" if headless else ""
        load_strict(model, sd, f"{path} does not fit timm model {name!r}", hint)
    return wrapped.eval()
