"""The audit's view of a timm model: the subject every timm backend builds the same way (:func:`timm_subject`: the
wrapper, the claim its backend reads off timm's attributes, timm's own forward, an observer of timm's modules, and
timm's own resize where it has one), and the claim and signature of a ViT, DeiT or Eva (:func:`vit_subject`,
:func:`vit_signature`; the BEiT and NaFlexViT backends read theirs in their own files).

Imports: :mod:`peanchor.audit` (lazily: subject, observe, adapters).
"""

from __future__ import annotations

from typing import Any

__all__ = ["timm_subject", "vit_signature", "vit_subject"]

#: Our rope names → the rotary layout the audit's claim names.
_LAYOUTS = {"rope": "axial", "rope_mixed": "mixed", "rope_dinov3": "dinov3"}


def timm_subject(wrapped: Any, claim: Any, observer: Any, *, relative_bias: bool = False,
                 own_resample: tuple[str, bool] | None = None) -> Any:  # fmt: skip
    """The :class:`~peanchor.audit.subject.AuditSubject` of a timm wrapper: ``claim``, timm's own forward as the
    native one, ``observer``; ``own_resample`` (mode, antialias): timm's own path to other grids is held against
    ``pe_resample`` (:func:`peanchor.audit.adapters.own_path`)."""
    from peanchor.audit.adapters import own_path
    from peanchor.audit.subject import AuditSubject

    inner = wrapped.model
    subject = AuditSubject(wrapped, wrapped.pe_name, "timm", claim, wrapped.img_size[0] // wrapped.grid[0],
                           wrapped.pe_scalable, None, relative_bias, lambda images: inner(images),
                           observer=observer)  # fmt: skip
    if own_resample is not None:
        mode, antialias = own_resample
        subject.own_resample = lambda: own_path(subject, lambda x: inner(x), mode, antialias)
    return subject


def vit_subject(wrapped: Any) -> Any:
    """A ViT's, DeiT's or Eva's subject: the claim read off the timm model's own attributes (``num_prefix_tokens``,
    ``no_embed_class``, its rotary module), timm's own forward, and timm's ``dynamic_img_size`` path beside
    ``pe_resample`` (a table without a rope)."""
    from peanchor.audit.observe import TimmObserver
    from peanchor.audit.subject import Claim

    inner = wrapped.model
    prefix = int(inner.num_prefix_tokens)
    table = getattr(inner, "pos_embed", None) is not None
    rows = (0 if getattr(inner, "no_embed_class", False) else prefix) if table else None
    rope = wrapped.pe.rope
    kind = "rotary" if rope else "learned table" if table else "none"
    said = f"timm {type(inner).__name__}: pos_embed={'yes' if table else 'none'}, rope={rope or 'none'}, "
    claim = Claim(kind, _LAYOUTS.get(rope) if rope else None, rows, prefix,
                  source=said + f"num_prefix_tokens={prefix}")  # fmt: skip
    resizes = table and not rope and getattr(inner, "dynamic_img_size", False)
    return timm_subject(wrapped, claim, TimmObserver(wrapped), own_resample=("bicubic", True) if resizes else None)


def vit_signature(wrapped: Any) -> str:
    """The model class, its table and prefix tokens, its rope's declared options, its attention class and whether
    it takes other sizes."""
    inner = wrapped.model
    rope = getattr(inner, "rope", None)
    keys = ("temperature", "in_pixels", "grid_indexing", "rotate_half", "grid_type", "normalize_coords")
    options = [f"{k}={getattr(rope, k)}" for k in keys if hasattr(rope, k)]
    options.append(f"ref={getattr(rope, 'ref_feat_shape', None) is not None}")
    rope_said = "none" if rope is None else f"{type(rope).__name__}({', '.join(options)})"
    table = getattr(inner, "pos_embed", None) is not None
    return (f"{type(inner).__name__} table={table} no_embed_class={getattr(inner, 'no_embed_class', False)} "
            f"prefix={inner.num_prefix_tokens} rope={rope_said} "
            f"attn={type(getattr(inner.blocks[0], 'attn', inner.blocks[0])).__name__} "
            f"dynamic={getattr(inner, 'dynamic_img_size', False)}")  # fmt: skip
