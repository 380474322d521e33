"""Rotations from skew-symmetric generators, shared by LieRE, ComRoPE and STRING: :func:`skew`,
:func:`exp_rotations`, :func:`cayley`. Registers no PE.

Imports: torch.
"""

from __future__ import annotations

import torch
from torch import Tensor


def skew(raw: Tensor) -> Tensor:
    """The skew-symmetric part ``raw − rawᵀ`` of square matrices ``(..., b, b)``: a Lie-algebra element of SO(b).

    >>> a = skew(torch.randn(3, 4, 4))
    >>> bool((a + a.mT).abs().max() == 0)
    True
    """
    return raw - raw.mT


def exp_rotations(generators: Tensor, coords: Tensor, alpha: float) -> Tensor:
    """``exp(α Σ_k p_k A_k)`` at every position: generators ``(..., K, nb, b, b)`` (skew), coords ``(N, K)`` →
    ``(..., N, nb, b, b)``. One matrix exponential per position (and block), never per pair of positions."""
    k = coords.shape[-1]
    gens = generators.unsqueeze(-5)  # (..., 1, K, nb, b, b)
    c = coords.to(generators).reshape(-1, k, 1, 1, 1)  # (N, K, 1, 1, 1)
    algebra = alpha * (gens * c).sum(dim=-4)  # (..., N, nb, b, b)
    return torch.linalg.matrix_exp(algebra)


def cayley(s: Tensor) -> Tensor:
    """The Cayley transform ``(I − S)(I + S)⁻¹`` of skew-symmetric ``S`` ``(..., d, d)``: an orthogonal matrix with
    no eigenvalue −1 (``S`` and ``(I + S)⁻¹`` commute, so this is ``(I + S)⁻¹ (I − S)``).

    >>> p = cayley(skew(torch.randn(5, 5, dtype=torch.float64)))
    >>> bool(torch.allclose(p @ p.mT, torch.eye(5, dtype=torch.float64)))
    True
    """
    eye = torch.eye(s.shape[-1], dtype=s.dtype, device=s.device).expand_as(s)
    return torch.linalg.solve(eye + s, eye - s)
