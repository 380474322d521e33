"""FLOPs of a peanchor ViT, counted from its architecture: what the GPU benchmark's MFU is measured against.

Counted: 2 FLOPs per multiply-add of every matrix product and convolution of one image's forward pass: the
patch embedding, per block the qkv projection, q·kᵀ and attention·v over all heads, the output projection
and the two MLP layers, the depth-wise convolution of ``peg``, the products a PE counts itself
(:meth:`peanchor.pe.base.PositionalEncoding.macs`: the block rotations of LieRE, ComRoPE and STRING, the MLP of the
Fourier code, once per pass), and the head on the CLS token. Not counted:
norms, softmax, GELU, dropout, the PE additions and rotations (elementwise, a few percent of the total and
bound by memory rather than by the tensor cores). A training step counts 3 × the forward pass (the backward
pass computes two products for each one of the forward), the usual convention for model FLOPs utilisation.

``tests/models/test_vit.py`` checks the forward count against ``torch.utils.flop_counter.FlopCounterMode``.

>>> from peanchor.models import create_model
>>> round(forward_flops(create_model("vit_paper", pe="ape", num_classes=100)) / 2e9, 2)  # GMAC per image
4.6

Imports: torch; :mod:`peanchor.models.vit`.
"""

from __future__ import annotations

from peanchor.models.vit import VisionTransformer

__all__ = ["forward_flops", "train_flops"]


def forward_flops(model: VisionTransformer) -> int:
    """FLOPs of one image's forward pass (see the module docstring for what counts)."""
    d = model.patch_embed.proj.out_channels
    p = model.patch_embed.proj.kernel_size[0]
    n = model.num_patches
    t = n + model.num_prefix  # tokens: CLS + patches
    hidden = model.blocks[0].mlp.fc1.out_features
    macs = n * d * 3 * p * p  # patch embedding
    per_block = t * d * 3 * d + 2 * t * t * d + t * d * d + 2 * t * d * hidden
    macs += model.depth * per_block
    conv = getattr(model.pe, "conv", None)  # peg: a k×k depth-wise convolution after one block
    if conv is not None:
        macs += n * d * conv.kernel_size[0] * conv.kernel_size[1]
    macs += d * model.head.out_features
    macs += model.pe.macs(1)  # the PE's own products (a general rotation of q and k; a Fourier code's MLP)
    return 2 * macs


def train_flops(model: VisionTransformer) -> int:
    """FLOPs of one image's training step: 3 × :func:`forward_flops`."""
    return 3 * forward_flops(model)
