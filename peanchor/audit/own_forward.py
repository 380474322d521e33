"""What every observer of a model's own forward shares (:mod:`peanchor.audit.observe` holds the timm and transformers
ones): :class:`OwnForward`, the base an observer fills in (its modules, its tables, its pass; the plain and the
PE-removed entry passes, cached by the images' bytes), :class:`Pass` (what one pass recorded), and the small hooks
they use: zeroing tensors for a pass, moving the patch tokens, a rotary table that does not rotate, one token at
every position.

Imports: torch.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn


__all__ = ["OwnForward", "Pass", "as_tensor", "first_arg", "hooks", "identity_rope", "other_grids", "permute_patches",
           "same_token_hooks", "zeroed"]  # fmt: skip


class _Stop(Exception):
    """Ends a pass once the tokens entering block 0 are recorded (``stop=True``): the checks that read the
    embedding need no more of the forward."""


@contextmanager
def zeroed(tensors: list[Tensor]) -> Iterator[None]:
    """The model's own table parameters set to zero for the pass and put back after: its PE removed in its own
    forward (what ``pe_zero`` does on peanchor's path)."""
    saved = [t.detach().clone() for t in tensors]
    with torch.no_grad():
        for t in tensors:
            t.zero_()
    try:
        yield
    finally:
        with torch.no_grad():
            for t, s in zip(tensors, saved):
                t.copy_(s)


def permute_patches(out: Tensor, perm: Tensor | None, channels_first: bool = False) -> Tensor:
    """A patch embedding's output with its token axis (row-major slots) permuted: ``(B, N, D)``, timm's NHWC
    ``(B, h, w, D)`` or, ``channels_first``, a Conv2d's ``(B, D, h, w)``."""
    if perm is None:
        return out
    if channels_first and out.dim() == 4:
        b, d, h, w = out.shape
        return out.flatten(2)[:, :, perm].reshape(b, d, h, w)
    return out.reshape(out.shape[0], -1, out.shape[-1])[:, perm].reshape(out.shape)


def identity_rope(table: Tensor) -> Tensor:
    """timm's rotary table ``cat([sin, cos])`` (last axis) of no rotation: sin 0, cos 1."""
    sin, cos = table.chunk(2, dim=-1)
    return torch.cat([torch.zeros_like(sin), torch.ones_like(cos)], dim=-1)


class OwnForward:
    """What the observers share: the own forward's embedding, and passes kept for the checks that repeat them."""

    patch: int
    native_grid: tuple[int, int]
    prefix: int

    def run(self, images: Tensor, **kwargs: Any) -> Pass:  # pragma: no cover  (each observer's own)
        raise NotImplementedError

    @property
    def dtype(self) -> torch.dtype:
        return next((p.dtype for p in self.module.parameters() if p.is_floating_point()), torch.float32)

    @property
    def module(self) -> nn.Module:  # pragma: no cover  (each observer's own)
        raise NotImplementedError

    def bias_tables(self) -> list[Tensor]:
        """The relative position bias tables (BEiT's), which removing the PE zeroes beside :meth:`tables`."""
        return []

    def rotary_cos_sin(self, seen: Pass, layer: int) -> tuple[Tensor, Tensor] | None:
        """The rotary table the model's own code handed block ``layer`` in ``seen``, as float64 ``(cos, sin)``."""
        return None

    def rotary_dtype(self, seen: Pass) -> torch.dtype | None:
        """The dtype of the rotary table, where it must be the run's (None: not checked; timm keeps it in float32)."""
        return None

    def declared_bias(self, grid: tuple[int, int]) -> Tensor | None:
        """What each block adds to ``q·kᵀ·scale`` as declared, ``(L|1, H, T, T)`` float64 (None: no bias)."""
        return None

    def size(self, grid: tuple[int, int] | None = None) -> tuple[int, int]:
        rows, cols = grid or self.native_grid
        return rows * self.patch, cols * self.patch

    def entry(self, images: Tensor, *, remove: bool = False) -> Pass:
        """The model's own forward up to block 0: ``tokens[0]`` ``(B, P + N, D)`` is what it hands block 0, and
        ``tables["patches"]`` the patch embedding's output; ``remove``: its table zeroed and its rotation the
        identity. What the model's code raised is raised."""
        seen = self.run(images.to(self.dtype), eager=False, remove=remove, stop=True)
        if seen.error is not None:
            raise seen.error
        return seen

    def plain(self, images: Tensor) -> Pass:
        """The model's own forward of ``images`` as it runs (fused attention), kept: ``reference_parity``,
        ``attention_paths`` and ``alpha_behaves`` read the same pass of the same probe."""
        cache = self.__dict__.setdefault("_plain", {})
        raw = images.detach().contiguous().flatten().view(torch.uint8).numpy()  # the images' exact bytes
        key = (tuple(images.shape), images.dtype, hashlib.sha1(raw).hexdigest())
        if key not in cache:
            cache.clear()
            cache[key] = self.run(images, eager=False)
        return cache[key]


@dataclass
class Pass:
    """What one forward handed on, per layer (``tokens[0]`` enters block 0, ``tokens[k + 1]`` leaves block k)."""

    tokens: list[Tensor] = field(default_factory=list)
    logits: Tensor | None = None
    tables: dict[int, Any] = field(default_factory=dict)  # layer → what the PE code handed the block
    q: dict[int, Tensor] = field(default_factory=dict)  # layer → (B, H, T, hd) before the rotation
    k: dict[int, Tensor] = field(default_factory=dict)
    v: dict[int, Tensor] = field(default_factory=dict)
    probs: dict[int, Tensor] = field(default_factory=dict)  # layer → (B, H, T, T), eager passes only
    error: Exception | None = None  # what the model's own forward raised (the tensors seen up to there are kept)


def first_arg(args: tuple, kwargs: dict, name: str) -> Tensor:
    return args[0] if args else kwargs[name]


def as_tensor(out: Any) -> Tensor:
    return out[0] if isinstance(out, (tuple, list)) else out


@contextmanager
def hooks(handles: list[Any]) -> Iterator[None]:
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def other_grids(native: tuple[int, int]) -> list[tuple[int, int]]:
    """The grids a model that takes other sizes runs at: its own, a non-square wider one (rows x cols+2), and one
    with as many slots as its own but another shape (timm PR #2737: a resample between equal counts skipped)."""
    rows, cols = native
    grids = [native, (rows, cols + 2)]
    same = (rows // 2, cols * 2) if rows % 2 == 0 else (rows * 2, cols // 2) if cols % 2 == 0 else None
    return grids + ([same] if same and same != native else [])


def same_token_hooks(attns: list[nn.Module], name: str) -> list[Any]:
    """Pre-hooks that hand every attention module one random token at every position (prefix included), drawn
    once per layer: the model's own q·k then depends on the slots through its PE alone."""
    g = torch.Generator().manual_seed(0)

    def hook_for(layer: int) -> Callable:
        def hook(_m: nn.Module, args: tuple, kwargs: dict) -> Any:
            x = first_arg(args, kwargs, name)
            token = torch.randn(1, 1, x.shape[-1], generator=g).to(x.dtype).expand_as(x).contiguous()  # (B, T, D)
            return ((token, *args[1:]), kwargs) if args else (args, {**kwargs, name: token})

        return hook

    # prepended: the hooks that read the attention's input (BEiT's q and k) see the one token
    return [a.register_forward_pre_hook(hook_for(i), with_kwargs=True, prepend=True) for i, a in enumerate(attns)]
