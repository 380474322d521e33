"""Robustness metrics: top-1 accuracy and the Fragility Score ``FS = 1 - A_shift / A_clean``.

Imports: torch, numpy.
"""

from __future__ import annotations

import math
from numbers import Real
from typing import overload

import numpy as np
import torch
from torch import Tensor

__all__ = ["accuracy", "fragility_score"]

@overload
def fragility_score(acc_clean: float, acc_shift: float) -> float: ...
@overload
def fragility_score(acc_clean: Tensor | float, acc_shift: Tensor | float) -> Tensor: ...
@overload
def fragility_score(acc_clean: np.ndarray | float, acc_shift: np.ndarray | float) -> np.ndarray: ...
def fragility_score(acc_clean, acc_shift):  # type: ignore[no-untyped-def]
    """Fragility Score ``1 - acc_shift / acc_clean``: the fraction of clean accuracy lost under a shift.

    0 means no loss, 1 means the shift leaves no correct prediction; negative if the shift helps.
    Undefined (NaN, no exception) where ``acc_clean == 0``. Works on floats, and elementwise
    (with broadcasting) on torch tensors or numpy arrays / sequences.

    Returns:
        score (float | Tensor | numpy.ndarray): a float for two numbers, else a tensor or array of the
            broadcast shape; NaN where ``acc_clean == 0``.

    Examples:
        >>> fragility_score(0.5, 0.375)
        0.25
        >>> fragility_score(0.0, 0.0)
        nan
        >>> fragility_score(torch.tensor([0.5, 0.0]), torch.tensor([0.25, 0.1]))
        tensor([0.5000,    nan])
        >>> fragility_score(np.array([1.0, 0.5]), 0.5)
        array([0.5, 0. ])
    """
    if isinstance(acc_clean, Real) and isinstance(acc_shift, Real):
        clean, shift = float(acc_clean), float(acc_shift)
        return math.nan if clean == 0.0 else 1.0 - shift / clean
    if isinstance(acc_clean, Tensor) or isinstance(acc_shift, Tensor):
        like = acc_clean if isinstance(acc_clean, Tensor) else acc_shift
        dtype = like.dtype if like.is_floating_point() else torch.float64
        clean_t = torch.as_tensor(acc_clean, dtype=dtype, device=like.device)
        shift_t = torch.as_tensor(acc_shift, dtype=dtype, device=like.device)
        score = 1.0 - shift_t / clean_t
        return torch.where(clean_t == 0, torch.full_like(score, math.nan), score)
    clean_a = np.asarray(acc_clean, dtype=np.float64)
    shift_a = np.asarray(acc_shift, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        score = 1.0 - shift_a / clean_a
    return np.where(clean_a == 0, np.nan, score)


def accuracy(logits: Tensor, labels: Tensor) -> float:
    """Top-1 accuracy of ``logits (B, C)`` against integer ``labels (B,)``; NaN for an empty batch.

    >>> accuracy(torch.tensor([[2.0, 1.0], [0.0, 3.0], [5.0, 1.0]]), torch.tensor([0, 1, 1]))
    0.6666666666666666
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, C), got {tuple(logits.shape)}")
    if labels.shape != logits.shape[:1]:
        raise ValueError(f"labels must have shape ({logits.shape[0]},) to match logits, got {tuple(labels.shape)}")
    if labels.numel() == 0:
        return math.nan
    correct = (logits.argmax(dim=-1) == labels).sum().item()
    return correct / labels.numel()
