"""Token order (RPI) as pure functions: permutations of the patch slots and the reordering of tokens by one.

Nothing here touches a model. Convention: slot ``i`` receives the patch content from position ``perm[i]``, i.e.
``permuted[:, i] = tokens[:, perm[i]]``. Positional encodings stay attached to the slots, so after a
permutation the PE describes the slot grid, not where the content came from.

An analysis hands a model a permutation inside an :class:`~peanchor.interventions.Intervention`.

Imports: torch only.
"""

from __future__ import annotations

import torch
from torch import Tensor


def random_permutation(
    n: int,
    *,
    batch: int | None = None,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> Tensor:
    """A random permutation of ``n`` token slots: ``(n,)``, or ``(batch, n)`` with one per sample.

    >>> g = torch.Generator().manual_seed(0)
    >>> p = random_permutation(5, generator=g)
    >>> sorted(p.tolist())
    [0, 1, 2, 3, 4]
    >>> random_permutation(4, batch=3, generator=g).shape
    torch.Size([3, 4])
    """
    if batch is None:
        perm = torch.randperm(n, generator=generator)
    else:
        # argsort of uniform noise gives independent uniform permutations per row.
        perm = torch.rand(batch, n, generator=generator).argsort(dim=-1)
    return perm.to(device) if device is not None else perm


def identity_permutation(n: int, device: torch.device | str | None = None) -> Tensor:
    return torch.arange(n, device=device)


def permute_tokens(tokens: Tensor, perm: Tensor) -> Tensor:
    """Reorder patch tokens: ``out[b, i] = tokens[b, perm[i]]`` (or ``perm[b, i]`` per sample).

    ``tokens`` is ``(B, N, D)``; ``perm`` is ``(N,)`` or ``(B, N)``.

    >>> t = torch.arange(6.).view(1, 3, 2)
    >>> permute_tokens(t, torch.tensor([2, 0, 1]))[0, :, 0].tolist()
    [4.0, 0.0, 2.0]
    """
    b, n, d = tokens.shape
    if perm.shape[-1] != n or perm.dim() not in (1, 2) or (perm.dim() == 2 and perm.shape[0] != b):
        raise ValueError(f"token_perm must have shape ({n},) or ({b}, {n}), got {tuple(perm.shape)}")
    perm = perm.to(tokens.device)
    if perm.dim() == 1:
        return tokens[:, perm]  # (B, N, D)
    return torch.gather(tokens, 1, perm.unsqueeze(-1).expand(b, n, d))  # (B, N, D)


def inverse_permutation(perm: Tensor) -> Tensor:
    """``inv`` with ``permute_tokens(permute_tokens(x, perm), inv) == x``."""
    return perm.argsort(dim=-1)
