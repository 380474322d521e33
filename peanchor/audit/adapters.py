"""Audit subjects for the timm and transformers adapters: the claim read off the wrapped model's own config
(timm: ``num_prefix_tokens``, ``no_embed_class``, its rotary module; transformers: the family and
``num_register_tokens``), the observer that watches the model's own modules (:mod:`peanchor.audit.observe`: the
rotary checks read q·k from the model's own forward, never from a copy of its code), its own forward, and its own
interpolation path (timm's ``dynamic_img_size``, transformers' ``interpolate_pos_encoding``)
compared with ``pe_resample`` at the documented mode on a non-square grid.

Imports: torch; :mod:`peanchor.adapters` (TimmViT, HFViT), :mod:`peanchor.interventions` (pe_resample).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from peanchor.audit.observe import HFObserver, TimmObserver
from peanchor.audit.probes import max_diff, random_images
from peanchor.audit.subject import AuditSubject, Claim
from peanchor.interventions import Intervention

__all__ = ["adapter_subject"]

_TIMM_LAYOUTS = {"rope": "axial", "rope_mixed": "mixed", "rope_dinov3": "dinov3"}


def adapter_subject(model: Any) -> AuditSubject | None:
    """The subject of a :class:`~peanchor.adapters.TimmViT` or :class:`~peanchor.adapters.hf_vit.HFViT`; None for
    anything else."""
    from peanchor.adapters.hf_vit import HFViT
    from peanchor.adapters.timm_vit import TimmViT

    if isinstance(model, TimmViT):
        return _timm_subject(model)
    if isinstance(model, HFViT):
        return _hf_subject(model)
    return None


def _timm_subject(model: Any) -> AuditSubject:
    inner = model.model
    prefix = int(inner.num_prefix_tokens)
    table = getattr(inner, "pos_embed", None) is not None
    rows = (0 if getattr(inner, "no_embed_class", False) else prefix) if table else None
    rope = model.pe.rope
    kind = "rotary" if rope else "learned table" if table else "none"
    claim = Claim(kind, _TIMM_LAYOUTS.get(rope) if rope else None, rows, prefix,
                  source=f"timm {type(inner).__name__}: pos_embed={'yes' if table else 'none'}, rope={rope or 'none'}, "
                  f"num_prefix_tokens={prefix}")  # fmt: skip
    subject = AuditSubject(model, model.pe_name, "timm", claim, model.img_size[0] // model.grid[0], model.pe_scalable,
                           None, False, lambda images: inner(images), observer=TimmObserver(model))  # fmt: skip
    if table and not rope and getattr(inner, "dynamic_img_size", False):
        subject.own_resample = lambda: _own_path(subject, lambda x: inner(x), "bicubic", True)
    return subject


def _own_path(subject: AuditSubject, forward: Any, mode: str, antialias: bool) -> float:
    """How far the model's own interpolation (``forward`` on images of another grid) is from ``pe_resample`` at
    ``mode``: the largest relative logit gap at two non-square grids, rows x (cols + 2) (upsampled) and
    (rows - 1) x cols (downsampled, where antialiasing matters)."""
    rows, cols = subject.grid
    gap = 0.0
    for grid in ((rows, cols + 2), (rows - 1, cols)) if rows > 2 else ((rows, cols + 2),):
        images = random_images(2, subject.size(grid))
        spec = f"pe_resample:grid={grid[0]}x{grid[1]},mode={mode},antialias={str(antialias).lower()}"
        with torch.no_grad():
            ours = subject.model.forward_intermediates(images, Intervention.parse(spec)).logits
            gap = max(gap, max_diff(forward(images), ours))
    return gap


def _hf_subject(model: Any) -> AuditSubject:
    family = model.family
    registers = int(getattr(model.model.config, "num_register_tokens", 0) or 0)
    prefix = family.extra_prefix + registers
    if family.rope is not None:
        claim = Claim("rotary", "dinov3", None, prefix, source=f"transformers {family.name}: rope, {registers} registers")
    else:
        claim = Claim("learned table", None, family.extra_prefix, prefix,
                      source=f"transformers {family.name}: a learned table, {registers} registers")  # fmt: skip
    def native(images: Tensor) -> Tensor:
        out = model.model(pixel_values=images)
        return out.logits if model.has_head else out.pooler_output

    subject = AuditSubject(model, model.pe_name.replace("hf:", f"hf:{family.name}:"), "transformers", claim,
                           model.img_size[0] // model.grid[0], model.pe_scalable, None, False, native,
                           observer=HFObserver(model))  # fmt: skip
    if family.table is not None and "input.grid" in model.hook_points.points:
        kwargs = {"interpolate_pos_encoding": True} if family.interpolate_kwarg else {}

        def interpolated(images: Tensor) -> Tensor:
            out = model.model(pixel_values=images, **kwargs)
            return out.logits if model.has_head else out.pooler_output

        # transformers 5 antialiases in DINOv2 with registers only (docs/interventions.md)
        antialias = family.name == "dinov2_with_registers"
        subject.own_resample = lambda: _own_path(subject, interpolated, "bicubic", antialias)
    return subject
