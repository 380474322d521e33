"""The audit's view of a model: what its config claims about the PE (:class:`Claim`) and the handles the checks
need (:class:`AuditSubject`): its hook points, its patch size, its own rotary code and its native forward.

Each backend builds the subject of its wrapper (``Backend.audit_subject``, :mod:`peanchor.adapters.backend`): the
claim is read from the library's config (peanchor: ``model.args``; timm: the model's own attributes; transformers:
its config), never from the hook points, so that a check can compare the two. :func:`declaration_of` reads what a
peanchor PE class declares.

Imports: torch; :mod:`peanchor.pe` (the declaration).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from peanchor.pe import PositionalEncoding
from peanchor.pe.declaration import PEDeclaration

__all__ = ["AuditSubject", "Claim", "declaration_of"]

#: The PE kinds a claim names.
KINDS = ("learned table", "sin-cos", "rotary", "relative bias", "conditional", "none")


@dataclass(frozen=True)
class Claim:
    """What a model's config says its PE is.

    ``kind`` is one of :data:`KINDS`; ``layout`` a rotary layout (``axial``, ``mixed``, ``dinov3``) or None;
    ``prefix_rows`` the table rows the prefix tokens get (0: none; None: no table); ``num_prefix`` the prefix
    tokens (CLS, registers, distillation); ``speeds`` the configured angle per unit step of each axial plane,
    fastest first per axis (None: not fixed by the config); ``sincos_temperature`` the temperature of a sin-cos
    code; ``also``: the further PE kinds the config names beside ``kind``, each a component the checks measure on
    its own (BEiT: a learned table beside its relative bias); ``source`` says where the claim was read."""

    kind: str
    layout: str | None
    prefix_rows: int | None
    num_prefix: int
    speeds: tuple[float, ...] | None = None
    sincos_temperature: float | None = None
    source: str = ""
    also: tuple[str, ...] = ()

    @property
    def components(self) -> tuple[str, ...]:
        """Every PE kind the config names: ``kind`` first, then ``also``."""
        return (self.kind, *self.also)

    def describe(self) -> str:
        parts = [" + ".join(self.components) + (f" ({self.layout})" if self.layout else "")]
        if self.prefix_rows is not None:
            parts.append(f"{self.prefix_rows} prefix row(s)")
        parts.append(f"{self.num_prefix} prefix token(s)")
        return ", ".join(parts)


#: ``rotate(t, layer)``: the model's own rotation of ``t`` ``(B, H, T, hd)`` (prefix tokens first) in ``layer``.
Rotate = Callable[[Tensor, int], Tensor]


@dataclass
class AuditSubject:
    """A model as the checks see it."""

    model: Any  # the analysis interface: forward_intermediates, hook_points, grid, num_prefix
    name: str
    backend: str  # "peanchor", "timm", "transformers"
    claim: Claim
    patch: int  # pixels per patch side
    scalable: bool
    rotate: Rotate | None = None  # the model's own rotary code (None: no rotation, or not reachable)
    relative_bias: bool = False
    native_forward: Callable[[Tensor], Tensor] | None = None  # the model's logits outside the analysis interface
    own_resample: Callable[[], float] | None = None  # its own interpolation path's distance from pe_resample
    observer: Any = None  # hooks on a timm / transformers model's own modules (audit.observe); None: peanchor's ViT
    declares: PEDeclaration | None = None  # what the PE class declares (peanchor's ViT; None: nothing)
    dtype: torch.dtype = torch.float32  # the dtype the checks run the model's own forward in
    parity_observer: Any = None  # the observer of the model in that dtype (None: ``observer``, float32)

    @property
    def hooks(self) -> Any:
        return self.model.hook_points

    @property
    def grid(self) -> tuple[int, int]:
        return tuple(self.model.grid)  # type: ignore[return-value]

    def size(self, grid: tuple[int, int] | None = None) -> tuple[int, int]:
        """The image size in pixels of ``grid`` (default: the model's)."""
        rows, cols = grid or self.grid
        return rows * self.patch, cols * self.patch


def declaration_of(cls: type[PositionalEncoding]) -> PEDeclaration | None:
    """What a PE class declares. A subclass that sets no ``declares`` of its own but inherits the base's
    ("none") while overriding what the base does declares nothing: None."""
    owner = next((c for c in cls.__mro__ if "declares" in vars(c)), PositionalEncoding)
    if owner is PositionalEncoding and cls is not PositionalEncoding:
        hooks = ("add", "rotary", "rotary_at", "table_rows", "attn_bias", "after_block")
        if any(getattr(cls, h) is not getattr(PositionalEncoding, h) for h in hooks):
            return None
    return cls.declares
