"""What the audit reads of a transformers model (:mod:`peanchor.adapters.hf_vit`'s backend delegates here): the
claim its family and config make about its PE, its own forward, its observer, and the signature the audit zoo
groups models by.

Imports: torch; :mod:`peanchor.adapters` (hf_bias), :mod:`peanchor.audit` (adapters, observe, subject).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from peanchor.adapters.hf_bias import beit_observer

__all__ = ["audit_subject", "claim", "signature"]


def audit_subject(wrapped: Any) -> Any:
    """The claim read off the family and the config, the model's own forward, and its own
    ``interpolate_pos_encoding`` beside ``pe_resample``."""
    from peanchor.audit.adapters import own_path
    from peanchor.audit.observe import HFObserver
    from peanchor.audit.subject import AuditSubject

    family = wrapped.family

    def native(images: Tensor, **kwargs: Any) -> Tensor:
        out = wrapped.model(pixel_values=images, **kwargs)
        return out.logits if wrapped.has_head else out.pooler_output

    subject = AuditSubject(wrapped, wrapped.pe_name.replace("hf:", f"hf:{family.name}:"), "transformers",
                           claim(wrapped), wrapped.img_size[0] // wrapped.grid[0], wrapped.pe_scalable, None,
                           wrapped.has_bias, native,
                           observer=beit_observer(wrapped) if family.bias else HFObserver(wrapped))  # fmt: skip
    if family.table is not None and "input.grid" in wrapped.hook_points.points:
        kwargs = {"interpolate_pos_encoding": True} if family.interpolate_kwarg else {}
        # transformers 5 antialiases in DINOv2 with registers only (docs/interventions.md)
        antialias = family.name == "dinov2_with_registers"
        subject.own_resample = lambda: own_path(subject, lambda x: native(x, **kwargs), "bicubic", antialias)
    return subject


def claim(wrapped: Any) -> Any:
    """What the family and the config say the PE is."""
    from peanchor.audit.subject import Claim

    family, config = wrapped.family, wrapped.model.config
    registers = int(getattr(config, "num_register_tokens", 0) or 0)
    prefix = family.extra_prefix + registers
    if family.rope is not None:
        said = f"transformers {family.name}: rope, {registers} registers"
        return Claim("rotary", "dinov3", None, prefix, source=said)
    if family.bias:
        shared = "a shared" if getattr(config, "use_shared_relative_position_bias", False) else "per-layer"
        shared = shared if wrapped.has_bias else "no"
        table = wrapped.has_table
        kind = "relative bias" if wrapped.has_bias else "learned table" if table else "none"
        return Claim(kind, None, family.extra_prefix if table else None, prefix,
                     source=f"transformers {family.name}: {shared} relative position bias, "
                     f"absolute table={'yes' if table else 'no'}",
                     also=("learned table",) if table and wrapped.has_bias else ())  # fmt: skip
    return Claim("learned table", None, family.extra_prefix, prefix,
                 source=f"transformers {family.name}: a learned table, {registers} registers")  # fmt: skip


def signature(wrapped: Any) -> str:
    """What decides the PE's behaviour: the family, its registers, BEiT's bias layout and table."""
    cfg = wrapped.model.config
    said = f"{wrapped.family.name} registers={int(getattr(cfg, 'num_register_tokens', 0) or 0)}"
    if wrapped.family.bias:
        said += (f" shared_bias={bool(cfg.use_shared_relative_position_bias)} "
                 f"layer_bias={bool(cfg.use_relative_position_bias)} table={wrapped.has_table}")  # fmt: skip
    return said
