"""Whether a PE's attention logits are relative: :func:`offset_spread`, the most the logit of one fixed (q, k) pair
moves between slot pairs with the same 2D offset (0 for a relative PE)."""

from __future__ import annotations

from collections.abc import Callable

import torch


def offset_spread(rotate: Callable[[torch.Tensor], torch.Tensor], grid: tuple[int, int], heads: int, hd: int,
                  bias: torch.Tensor | None = None, seed: int = 0) -> float:  # fmt: skip
    """``rotate(t)`` turns ``(1, heads, 1 + N, hd)`` (CLS first) the way the model turns q and k; ``bias``
    ``(heads, N, N)`` is added to the logits. Every slot holds the same q and the same k, so the logits differ only
    by position; both positions shifted by the same offset must give the same logit."""
    g = torch.Generator().manual_seed(seed)
    n = grid[0] * grid[1]
    q, k = torch.randn(1, heads, 1, hd, generator=g), torch.randn(1, heads, 1, hd, generator=g)
    rq = rotate(q.expand(1, heads, 1 + n, hd))[0, :, 1:].double()  # (H, N, hd)
    rk = rotate(k.expand(1, heads, 1 + n, hd))[0, :, 1:].double()
    scores = torch.einsum("hnd,hmd->hnm", rq, rk)  # (H, N, N)
    if bias is not None:
        scores = scores + bias.double()
    cols = grid[1]
    spread, seen = 0.0, {}
    for i in range(n):
        for j in range(n):
            off = (i // cols - j // cols, i % cols - j % cols)
            ref = seen.setdefault(off, scores[:, i, j])
            spread = max(spread, float((scores[:, i, j] - ref).abs().max()))
    assert len(seen) == (2 * grid[0] - 1) * (2 * grid[1] - 1)
    return spread
