"""Check 3, ``rotary_relative``: the model's own rotary code makes q·k depend on the offset between two slots
only. peanchor's ViT: random q and k, the same at every slot, are rotated by its rotary tables. timm and
transformers: the model's own forward runs with one random token at every position of every attention module
(pre-hooks on the model's modules) and its eager attention weights are read; ``log p(i→j) − log p(i→i)`` is then
the rotated logit minus the offset-0 one. Every pair of slots with the same 2D offset must give the same logit. A
dropped ``rotate_half``, a wrong interleave or a table in another layout
breaks this; so does a rotation applied to the prefix tokens, which must come out as they went in.

Imports: torch.
"""

from __future__ import annotations

import torch

from peanchor.audit.probes import random_images, watcher
from peanchor.audit.registry import CHECKS, Check
from peanchor.audit.result import CheckResult
from peanchor.audit.subject import AuditSubject

NAME = "rotary_relative"
TOLERANCE = 1e-4
DRAWS = 4


def offset_spread(logits: torch.Tensor, grid: tuple[int, int], valid: torch.Tensor | None = None) -> float:
    """The largest spread (max - min) of ``logits`` ``(..., N, N)`` among slot pairs of one 2D offset, relative
    to the logits' largest magnitude; ``valid`` (bool, like ``logits``): only those pairs count."""
    rows, cols = grid
    slot = torch.arange(rows * cols)
    y, x = slot // cols, slot % cols
    offset = ((y[:, None] - y[None, :] + rows - 1) * (2 * cols - 1) + (x[:, None] - x[None, :] + cols - 1)).flatten()
    flat = logits.reshape(-1, rows * cols * rows * cols).double()  # (..., N·N)
    groups = int(offset.max()) + 1
    index = offset.expand_as(flat)
    keep = torch.ones_like(flat, dtype=torch.bool) if valid is None else valid.reshape(flat.shape)
    top, bottom = flat.where(keep, -torch.inf), flat.where(keep, torch.inf)
    hi = torch.full((flat.shape[0], groups), -torch.inf, dtype=flat.dtype).scatter_reduce(1, index, top, "amax")
    lo = torch.full((flat.shape[0], groups), torch.inf, dtype=flat.dtype).scatter_reduce(1, index, bottom, "amin")
    spread = (hi - lo).nan_to_num(neginf=0.0)  # a group with no valid pair spreads by nothing
    return float(spread.max() / flat.where(keep, 0.0).abs().max().clamp_min(1e-12))


def check(subject: AuditSubject) -> CheckResult:
    if "rope.tables" not in subject.hooks.points:
        return CheckResult(NAME, "n/a", None, "the model has no rotary PE")
    if subject.rotate is None:
        if subject.observer is None or subject.observer.missing():
            return CheckResult(NAME, "n/a", None, f"the {subject.backend} model's attention cannot be watched")
        return _observed(subject)
    hooks = subject.hooks
    n, p = hooks.grid[0] * hooks.grid[1], hooks.num_prefix
    head_dim = len(hooks.planes) * 2 if hooks.planes else None
    g = torch.Generator().manual_seed(0)
    spread, prefix_moved = 0.0, 0.0
    for layer in range(hooks.depth):
        for _ in range(DRAWS):
            q0, k0 = torch.randn(2, 1, hooks.num_heads, 1, head_dim or 0, generator=g)
            q = subject.rotate(q0.expand(1, -1, p + n, -1).contiguous(), layer)  # (1, H, T, hd)
            k = subject.rotate(k0.expand(1, -1, p + n, -1).contiguous(), layer)
            prefix_moved = max(prefix_moved, float((q[:, :, :p] - q0).abs().max()), float((k[:, :, :p] - k0).abs().max()))
            logits = q[:, :, p:] @ k[:, :, p:].transpose(-2, -1)  # (1, H, N, N)
            spread = max(spread, offset_spread(logits, hooks.grid))
    if prefix_moved > 1e-6:
        return CheckResult(NAME, "fail", prefix_moved, f"the rotation moves the {p} prefix token(s) by up to "
                           f"{prefix_moved:.3g}; they must not be rotated")  # fmt: skip
    status = "pass" if spread <= TOLERANCE else "fail"
    return CheckResult(NAME, status, spread, f"logits of equal offsets spread by {spread:.2g} (relative; pass ≤ "
                       f"{TOLERANCE:g}) over {hooks.depth} layer(s), {DRAWS} random q, k each")  # fmt: skip


def _observed(subject: AuditSubject) -> CheckResult:
    """The spread of the model's own q·k (read off its eager attention weights on one repeated token)."""
    obs = watcher(subject)  # in the audit's dtype
    p, spread, excess = obs.prefix, 0.0, 0.0
    # In float16 and bfloat16, q·k is rounded (a few eps, relative) and so are the weights before the log (about
    # eps, absolute): each layer may spread by that much over its logits' size. Measured on healthy EVA02 and
    # DINOv3 models: up to 3.6 eps relative plus 1 eps absolute; a dropped rotation spreads by 1 relative.
    eps = 0.0 if obs.dtype == torch.float32 else torch.finfo(obs.dtype).eps
    for grid in obs.grids():
        images = random_images(1, (grid[0] * obs.patch, grid[1] * obs.patch)).to(obs.dtype)
        seen = obs.run(images, eager=True, same=True)
        if seen.error is not None:
            raise seen.error
        for layer in range(len(obs.attns)):
            probs = seen.probs[layer][:, :, p:, p:].double()  # (1, H, N, N)
            logp = probs.clamp_min(1e-300).log()
            logits = logp - logp.diagonal(dim1=-2, dim2=-1)[..., :, None]  # (1, H, N, N): minus the offset 0
            # float16's weights below 2^-10 have lost their digits (or flushed to 0): those pairs do not count
            valid = (probs >= 2**-10) & (probs.diagonal(dim1=-2, dim2=-1)[..., :, None] >= 2**-10) if eps else None
            size = float(logits.where(valid, 0.0).abs().max().clamp_min(1e-12)) if eps else 1.0
            layer_spread = offset_spread(logits, grid, valid)
            spread = max(spread, layer_spread)
            excess = max(excess, layer_spread / (max(TOLERANCE, 6 * eps) + 2 * eps / size))
    allowed = f"pass ≤ {TOLERANCE:g}"
    if eps:
        allowed = f"pass ≤ 6 eps + 2 eps over each layer's logit size, {_name(obs.dtype)}"
    status = "pass" if excess <= 1.0 else "fail"
    return CheckResult(NAME, status, spread, f"the model's own q·k at equal offsets spreads by {spread:.2g} "
                       f"(relative; {allowed}) over {len(obs.attns)} layer(s), grids "
                       f"{', '.join(f'{r}x{c}' for r, c in obs.grids())}")  # fmt: skip


def _name(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


CHECKS.register(Check(NAME, "q·k after the model's rotation depends only on the offset; prefix tokens are not rotated", check))
