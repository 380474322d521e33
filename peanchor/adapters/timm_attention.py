"""Attention weights out of timm's own attention code, for the attention-distance lens.

timm's attention modules run fused SDPA by default, which does not return its weights. Each supported one also
has timm's eager path (``fused_attn = False``): ``softmax(q·kᵀ·scale + mask)`` from the q and k it just made
(after ``q_norm``/``k_norm`` and, in the Eva family, after RoPE on the patch tokens), then ``attn_drop`` of
those weights, then ``@ v``. For a pass that wants the weights, :func:`capture_attention` switches each block's
module to that eager path and reads the weights as the output of its ``attn_drop`` (the identity in eval
mode), so they are exactly what the block multiplies ``v`` with; afterwards the fused path is restored. The
logits of such a pass equal the fused ones to float rounding. What is read, per family:

====================================== ================================ =======================================
block (timm)                           module read                      its weights
====================================== ================================ =======================================
vision_transformer.Block               ``block.attn`` (Attention)        softmax(q·kᵀ·scale), q/k after qk-norm
vision_transformer.ParallelScalingBlock the block itself                  the same, inside the parallel block
eva.EvaBlock (EVA, EVA02, DINOv3)      ``block.attn`` (EvaAttention)     the same, q/k after RoPE on patches
eva.EvaBlock (``*_rope_*`` ViTs)       ``block.attn`` (AttentionRope)    the same, q/k after RoPE on patches
beit.Block (BEiT)                      ``block.attn`` (beit.Attention)   softmax(q·kᵀ·scale + relative bias)
====================================== ================================ =======================================

In every case the prefix tokens (CLS and register tokens) come first, as queries and as keys. A block whose
attention module is none of these leaves the model without attention weights (the lens is then skipped).

Imports: torch, timm (lazily, inside the functions); :mod:`peanchor.models.interface`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from torch import Tensor, nn

from peanchor.models.interface import AttentionSink

__all__ = ["attention_modules", "capture_attention"]


def _known_classes() -> tuple[type, ...]:
    """The timm modules whose eager path is ``softmax → attn_drop → @ v`` (see the module docstring)."""
    from timm.models import vision_transformer as vt

    known: list[type] = [vt.Attention, vt.ParallelScalingBlock]
    try:
        from timm.models.eva import EvaAttention

        known.append(EvaAttention)
    except ImportError:  # pragma: no cover (older timm)
        pass
    try:
        from timm.models.beit import Attention as BeitAttention  # its bias added before the softmax

        known.append(BeitAttention)
    except ImportError:  # pragma: no cover (older timm)
        pass
    try:
        from timm.layers.attention import AttentionRope

        known.append(AttentionRope)
    except ImportError:  # pragma: no cover (older timm)
        pass
    return tuple(known)


def attention_modules(blocks: nn.ModuleList) -> list[nn.Module] | None:
    """For each block, the module that computes its attention weights; None if any block's is unknown."""
    known = _known_classes()
    modules = []
    for block in blocks:
        module = block if type(block) in known else getattr(block, "attn", None)
        if type(module) not in known or not isinstance(getattr(module, "attn_drop", None), nn.Module):
            return None
        modules.append(module)
    return modules


@contextmanager
def capture_attention(modules: list[nn.Module], sink: AttentionSink | None) -> Iterator[None]:
    """During the block, hand every block's attention weights ``(B, H, T, T)`` to ``sink(layer, weights)``,
    reading them from timm's eager path; restore each module's ``fused_attn`` afterwards. ``sink=None``: no-op.

    Raises RuntimeError if a block ran its attention other than once per forward.
    """
    if sink is None:
        yield
        return
    calls = [0] * len(modules)
    saved = [m.fused_attn for m in modules]

    def hook_for(layer: int, sink: AttentionSink) -> Callable[[nn.Module, object, Tensor], None]:
        def hook(_module: nn.Module, _inputs: object, weights: Tensor) -> None:
            calls[layer] += 1
            sink(layer, weights)

        return hook

    handles = []
    try:
        for layer, module in enumerate(modules):
            module.fused_attn = False  # timm's own eager attention: the weights are a tensor we can see
            handles.append(module.attn_drop.register_forward_hook(hook_for(layer, sink)))
        yield
    finally:
        for handle in handles:
            handle.remove()
        for module, fused in zip(modules, saved):
            module.fused_attn = fused
    if any(c != 1 for c in calls):
        raise RuntimeError(f"the attention of each block ran {calls} times in one forward; expected once each")
