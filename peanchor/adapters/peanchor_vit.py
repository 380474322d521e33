"""The peanchor backend: peanchor's own ViT (:class:`~peanchor.models.vit.VisionTransformer`) already offers the
analysis interface; this file says how the audit sees it. Its claim is what the PE class its config names declares
(``declares``, :mod:`peanchor.pe.declaration`), never its name: a plug-in PE is audited by what it says of itself,
and one that declares nothing is "n/a" in every check.

Imports: torch; :mod:`peanchor.adapters` (backend), :mod:`peanchor.models` (VisionTransformer), :mod:`peanchor.pe`
(RotaryTables, the registry), :mod:`peanchor.audit` (subject: the types and the declaration).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from peanchor.adapters.backend import BACKENDS, Backend
from peanchor.models.vit import VisionTransformer
from peanchor.pe import RotaryTables
from peanchor.pe.registry import PE_REGISTRY

__all__ = ["PeanchorBackend"]


@BACKENDS.register
class PeanchorBackend(Backend):
    """peanchor's own ViT, as it is."""

    name = "peanchor"
    summary = "a peanchor model (peanchor.create_model / load_model)"

    def accepts(self, model: Any) -> bool:
        return isinstance(model, VisionTransformer)

    def wrap(self, model: Any, *, img_size: int | None = None, model_args: dict[str, Any] | None = None) -> Any:
        return model

    def wraps(self, wrapped: Any) -> bool:
        return isinstance(wrapped, VisionTransformer)

    def audit_subject(self, wrapped: Any) -> Any:
        return _peanchor_subject(wrapped)


def _peanchor_subject(model: VisionTransformer) -> Any:
    from peanchor.audit.subject import AuditSubject, declaration_of

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


def _peanchor_claim(declared: Any, options: dict[str, Any], head_dim: int, source: str,
                    num_prefix: int) -> Any:  # fmt: skip
    """The claim of a peanchor PE, read from what its class declares (never from its name)."""
    from peanchor.audit.subject import Claim

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
