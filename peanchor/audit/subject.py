"""The audit's view of a model: what its config claims about the PE (:class:`Claim`) and the handles the checks
need (:class:`AuditSubject`): its hook points, its patch size, its own rotary code and its native forward.

:func:`subject_for` wraps peanchor's ViT, the timm adapter and the transformers adapter (a raw timm or
transformers model is wrapped by ``peanchor.api.wrap_model`` first, in :mod:`peanchor.audit.runner`). The claim
is read from the config (peanchor: ``model.args``; timm: the model's own attributes; transformers: its config),
never from the hook points, so that a check can compare the two.

The claim of a peanchor model is what the class its config names declares (``declares``,
:mod:`peanchor.pe.declaration`), never its name: a plug-in PE is audited by what it says of itself, and one that
declares nothing is "n/a" in every check.

Imports: torch; :mod:`peanchor.models` (VisionTransformer), :mod:`peanchor.pe` (RotaryTables, the declaration,
the registry).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from peanchor.errors import ConfigError
from peanchor.models.vit import VisionTransformer
from peanchor.pe import PositionalEncoding, RotaryTables
from peanchor.pe.declaration import PEDeclaration
from peanchor.pe.registry import PE_REGISTRY

__all__ = ["AuditSubject", "Claim", "subject_for"]

#: The PE kinds a claim names.
KINDS = ("learned table", "sin-cos", "rotary", "relative bias", "conditional", "none")


@dataclass(frozen=True)
class Claim:
    """What a model's config says its PE is.

    ``kind`` is one of :data:`KINDS`; ``layout`` a rotary layout (``axial``, ``mixed``, ``dinov3``) or None;
    ``prefix_rows`` the table rows the prefix tokens get (0: none; None: no table); ``num_prefix`` the prefix
    tokens (CLS, registers, distillation); ``speeds`` the configured angle per unit step of each axial plane,
    fastest first per axis (None: not fixed by the config); ``sincos_temperature`` the temperature of a sin-cos
    code; ``source`` says where the claim was read."""

    kind: str
    layout: str | None
    prefix_rows: int | None
    num_prefix: int
    speeds: tuple[float, ...] | None = None
    sincos_temperature: float | None = None
    source: str = ""

    def describe(self) -> str:
        parts = [self.kind + (f" ({self.layout})" if self.layout else "")]
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


def subject_for(model: Any) -> AuditSubject:
    """The audit subject of a wrapped model; anything else is one ConfigError line naming what can be audited."""
    if isinstance(model, VisionTransformer):
        return _peanchor_subject(model)
    from peanchor.audit.adapters import adapter_subject

    subject = adapter_subject(model)
    if subject is None:
        raise ConfigError(
            f"cannot audit a {type(model).__module__}.{type(model).__name__}: peanchor audits its own ViT, timm "
            "ViT/Eva models and transformers ViT, DeiT, DINOv2, CLIP, SigLIP and DINOv3 vision models"
        )
    return subject


def _peanchor_subject(model: VisionTransformer) -> AuditSubject:
    args = model.args
    pe = args.pe if args is not None else model.pe_name
    options = dict(args.pe_kwargs) if args is not None else {}
    source = f"model_args pe={pe!r}" if args is not None else f"the PE module {pe!r} (no model_args)"
    head_dim = model.patch_embed.proj.out_channels // model.blocks[0].attn.num_heads
    named = PE_REGISTRY[pe] if pe in PE_REGISTRY else type(model.pe)  # the config's PE, not the module's
    declared = declaration_of(named)
    said = f"{source}, declared {declared.kinds if declared else 'nothing'}"
    claim = _peanchor_claim(declared, options, head_dim, said, model.num_prefix)
    rotate = None
    if model.pe.has_rotary:

        def rotate(t: Tensor, layer: int) -> Tensor:
            tables = model.pe.rotary(1.0)
            assert isinstance(tables, RotaryTables)
            return tables.layer(layer).apply(t, model.num_prefix)

    return AuditSubject(
        model, f"peanchor:{pe}", "peanchor", claim, model.patch_embed.proj.kernel_size[0], model.pe_scalable,
        rotate, model.pe.attn_bias(1.0) is not None, lambda images: model(images), declares=declared,
    )  # fmt: skip


def declaration_of(cls: type[PositionalEncoding]) -> PEDeclaration | None:
    """What a PE class declares. A subclass that sets no ``declares`` of its own but inherits the base's
    ("none") while overriding what the base does declares nothing: None."""
    owner = next((c for c in cls.__mro__ if "declares" in vars(c)), PositionalEncoding)
    if owner is PositionalEncoding and cls is not PositionalEncoding:
        hooks = ("add", "rotary", "rotary_at", "table_rows", "attn_bias", "after_block")
        if any(getattr(cls, h) is not getattr(PositionalEncoding, h) for h in hooks):
            return None
    return cls.declares


def _peanchor_claim(declared: PEDeclaration | None, options: dict[str, Any], head_dim: int, source: str,
                    num_prefix: int) -> Claim:  # fmt: skip
    """The claim of a peanchor PE, read from what its class declares (never from its name)."""
    if declared is None:
        return Claim("undeclared", None, None, num_prefix, source=source)
    kinds, param = declared.kinds, declared.param
    rows = {"none": 0, "zero": 0, "own": num_prefix}[declared.prefix]
    if "rotary" in kinds:
        # the axes as configured: an option of the PE ("rope" of rope_ape, "axes") over what it declares
        layout = str(options.get("rope", options.get("axes", param["axes"]))) if "axes" in param else None
        speeds = None
        if layout == "axial" and "theta" in param:
            theta = float(options.get("theta", param["theta"]))
            quarter = head_dim // 4
            speeds = tuple(theta ** (-j / quarter) for j in range(quarter))
        return Claim("rotary", layout, rows if "absolute" in kinds else None, num_prefix, speeds=speeds, source=source)
    if "absolute" in kinds:
        if declared.layout == "function" and "temperature" in param:
            temperature = float(options.get("temperature", param["temperature"]))
            cls_rows = num_prefix if options.get("cls") == "learned" else rows
            return Claim("sin-cos", None, cls_rows, num_prefix, sincos_temperature=temperature, source=source)
        return Claim("learned table", declared.layout, rows, num_prefix, source=source)
    if "bias" in kinds:
        return Claim("relative bias", None, None, num_prefix, source=source)
    if "conditional" in kinds:
        return Claim("conditional", None, None, num_prefix, source=source)
    return Claim("none", None, None, num_prefix, source=source)
