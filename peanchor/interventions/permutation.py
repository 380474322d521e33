"""Token order (RPI) as pure functions: permutations of the patch slots and the reordering of tokens by one.

Nothing here touches a model. Convention: slot ``i`` receives the patch content from position ``perm[i]``, i.e.
``permuted[:, i] = tokens[:, perm[i]]``. Positional encodings stay attached to the slots, so after a
permutation the PE describes the slot grid, not where the content came from.

An analysis hands a model a permutation inside an :class:`~peanchor.interventions.Intervention`. Its default RPI
gives every image a permutation of its own from a stream keyed by (seed, draw, image index),
:func:`image_permutations`, so that an image is permuted the same way whatever batch, shard or α it is evaluated in.

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

    Returns:
        An int64 tensor ``(n,)``, or ``(batch, n)``, on ``device``.

    Examples:
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


_MASK64 = (1 << 64) - 1


def _splitmix64(x: int) -> int:
    """One step of SplitMix64 (Steele et al., 2014): a bijective 64-bit mix, so nearby keys give unrelated seeds."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def image_stream_seed(seed: int, draw: int, index: int) -> int:
    """The 64-bit seed of image ``index``'s permutation in RPI draw ``draw`` of an analysis seeded ``seed``: the three
    keys chained through SplitMix64, so that no two (seed, draw, index) share a stream by arithmetic accident
    (``seed + draw`` would make draw 1 of seed 0 draw 0 of seed 1).

    >>> image_stream_seed(0, 0, 1) != image_stream_seed(0, 1, 0) != image_stream_seed(1, 0, 0)
    True
    """
    return _splitmix64(_splitmix64(_splitmix64(seed & _MASK64) ^ (draw & _MASK64)) ^ (index & _MASK64))


def image_permutations(n: int, indices: Tensor | list[int], *, seed: int, draw: int) -> Tensor:
    """One permutation of ``n`` slots per image, ``(B, n)`` int64 (CPU): row ``b`` is ``randperm(n)`` from a generator
    seeded with :func:`image_stream_seed` ``(seed, draw, indices[b])``, so an image's permutation depends on its index
    in the evaluation set only, never on the batch it is in.

    >>> a = image_permutations(6, [3, 4], seed=0, draw=0)
    >>> b = image_permutations(6, [4], seed=0, draw=0)
    >>> a.shape, bool((a[1] == b[0]).all())
    (torch.Size([2, 6]), True)
    """
    rows = [int(i) for i in (indices.tolist() if isinstance(indices, Tensor) else indices)]
    generator = torch.Generator()
    out = torch.empty(len(rows), n, dtype=torch.int64)
    for b, index in enumerate(rows):
        generator.manual_seed(image_stream_seed(seed, draw, index))
        out[b] = torch.randperm(n, generator=generator)
    return out  # (B, n)


def identity_permutation(n: int, device: torch.device | str | None = None) -> Tensor:
    return torch.arange(n, device=device)


def permute_tokens(tokens: Tensor, perm: Tensor) -> Tensor:
    """Reorder patch tokens: ``out[b, i] = tokens[b, perm[i]]`` (or ``perm[b, i]`` per sample).

    ``tokens`` is ``(B, N, D)``; ``perm`` is ``(N,)`` or ``(B, N)``.

    Returns:
        ``(B, N, D)``: the reordered tokens.

    Examples:
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
