"""Interventions on token order and PE strength, as pure functions.

The model takes them as arguments (``token_perm``, ``pe_scale``); nothing here touches a model.
Convention: slot ``i`` receives the patch content from position ``perm[i]``, i.e.
``permuted[:, i] = tokens[:, perm[i]]``. Positional encodings stay attached to the slots, so after a
permutation the PE describes the slot grid, not where the content came from.

An analysis hands a model both at once as an :class:`Intervention` (``model.forward_intermediates(images,
Intervention(perm, 0.5))``); the model's convenience methods take them as keywords.

Imports: torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True, eq=False)
class Intervention:
    """What an analysis changes at inference, and nothing else: the token order (RPI) and the PE scale (α).

    ``token_perm``: ``(N,)`` shared by the batch or ``(B, N)`` per sample; slot ``i`` receives the patch content
    from position ``token_perm[i]`` (None: tokens in order). ``pe_scale``: α, 1 = the PE as trained, 0 = none.

    >>> Intervention().pe_scale, Intervention(pe_scale=0.5).token_perm is None
    (1.0, True)
    """

    token_perm: Tensor | None = None
    pe_scale: float = 1.0


#: Tokens in order, the PE as trained.
NO_INTERVENTION = Intervention()


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
