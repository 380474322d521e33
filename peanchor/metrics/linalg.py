"""Dense linear algebra that the lenses run inside analysis workers, written so that no LAPACK path known to fail
there is taken.

Batched LU (``torch.linalg.solve`` on a stack of matrices) is such a path: with torch 2.14.1's CPU LAPACK (oneMKL)
and two threads, a batch of two well-conditioned 384 × 384 systems makes MKL report "Parameter 6 was incorrect on
entry to DLASWP" and either raise "Pivots given to lu_solve must all be greater or equal to 1" or never return,
while the same systems solve one at a time, or with one thread. The normal equations of a ridge regression are
symmetric positive definite by construction, so :func:`solve_spd` solves them as such, by Cholesky (batched
Cholesky has no pivots and is not affected), and keeps a guarded fallback for a factorisation that fails (a matrix
that is not numerically positive definite): LU one matrix at a time, then least squares one matrix at a time.
Which one ran is returned with the solution, so that a caller can say so.

Imports: torch only.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["SOLVERS", "solve_spd"]

# The solvers, in the order they are tried.
SOLVERS: tuple[str, ...] = ("cholesky", "lu per matrix", "lstsq per matrix")


def _finite(x: Tensor) -> bool:
    return bool(torch.isfinite(x).all())


def solve_spd(a: Tensor, b: Tensor) -> tuple[Tensor, str]:
    """``X`` with ``a @ X = b`` for a batch of symmetric positive definite ``a (..., D, D)`` and ``b (..., D, K)``,
    and the name of the solver that produced it (one of :data:`SOLVERS`).

    Batched Cholesky first (``torch.linalg.cholesky_ex``, then ``torch.cholesky_solve``); where it reports a matrix
    that is not positive definite, or gives a non-finite solution, each matrix is solved on its own by LU, and where
    that fails too, by least squares. Nothing is batched on the fallback paths: batched LU is what fails.

    >>> a = torch.tensor([[[4.0, 2.0], [2.0, 3.0]]], dtype=torch.float64)
    >>> x, how = solve_spd(a, torch.tensor([[[2.0], [1.0]]], dtype=torch.float64))
    >>> x.squeeze().tolist(), how
    ([0.5, 0.0], 'cholesky')
    """
    if a.dim() < 2 or a.shape[-1] != a.shape[-2] or b.dim() != a.dim() or b.shape[:-1] != a.shape[:-1]:
        raise ValueError(f"solve_spd needs a (..., D, D) and b (..., D, K), got {tuple(a.shape)} and {tuple(b.shape)}")
    factor, info = torch.linalg.cholesky_ex(a)
    if not bool(info.any()):
        x = torch.cholesky_solve(b, factor)
        if _finite(x):
            return x, SOLVERS[0]
    flat_a, flat_b = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    try:
        x = torch.stack([torch.linalg.solve(m, r) for m, r in zip(flat_a, flat_b)])
        if _finite(x):
            return x.reshape(b.shape), SOLVERS[1]
    except RuntimeError:  # a singular matrix
        pass
    x = torch.stack([torch.linalg.lstsq(m, r).solution for m, r in zip(flat_a, flat_b)])
    return x.reshape(b.shape), SOLVERS[2]
