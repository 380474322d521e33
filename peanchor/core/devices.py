"""Which torch device a ``--device`` preference names, checked before any work: ``auto`` (a GPU when there is one),
``cpu``, ``cuda``, ``cuda:N``, ``mps``. A device this machine does not have is one
:class:`~peanchor.core.errors.ConfigError` line naming the setting (``--device``, ``train.device``) and what to use
instead. ``train`` and ``analyze`` (and :func:`peanchor.analyze`) share it.

Imports: torch (inside the function: checking the spelling needs none).
"""

from __future__ import annotations

from typing import Any

from peanchor.core.errors import ConfigError

__all__ = ["DEVICE_CHOICES", "resolve_device"]

DEVICE_CHOICES = "auto, cpu, cuda, cuda:N or mps"


def resolve_device(preference: Any, *, setting: str = "--device", local_rank: int | None = None) -> Any:
    """``preference`` (a string, a ``torch.device`` or None for ``auto``) as a ``torch.device`` that exists here;
    ``auto`` and ``cuda`` mean the GPU of ``local_rank`` (None: the current one, ``cuda``)."""
    import torch

    text = "auto" if preference is None else str(preference)
    given = f"{setting} {text}" if setting.startswith("--") else f"{setting}={text!r}"  # a flag, or a config key
    gpu = "cuda" if local_rank is None else f"cuda:{local_rank}"
    if text == "auto":
        return torch.device(gpu) if torch.cuda.is_available() else torch.device("cpu")
    if text.startswith("cuda"):
        index = text.partition(":")[2]
        if text != "cuda" and not (text.startswith("cuda:") and index.isdigit()):
            raise ConfigError(f"{given}: expected {DEVICE_CHOICES}")
        if not torch.cuda.is_available():
            raise ConfigError(f"{given}, but CUDA is not available here; use --device cpu")
        if index and int(index) >= torch.cuda.device_count():
            raise ConfigError(f"{given}, but only {torch.cuda.device_count()} GPU(s) are visible here")
        return torch.device(text if index else gpu)
    if text == "mps":
        if not (hasattr(torch.backends, "mps") and torch.backends.mps.is_available()):
            raise ConfigError(f"{given}, but MPS is not available here; use --device cpu")
        return torch.device("mps")
    if text == "cpu":
        return torch.device("cpu")
    raise ConfigError(f"{given}: expected {DEVICE_CHOICES}")
