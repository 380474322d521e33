"""Cayley-STRING (Schenck et al., arXiv 2502.02562: R(p) P with P = (I − S)(I + S)⁻¹, S skew) against numpy: the
Cayley transform, RoPE-Mixed's 2×2 rotations written as a loop, their product; the promises: P orthogonal, relative
logits, and a fresh STRING (S = 0) is RoPE-Mixed."""

from __future__ import annotations

import math

import numpy as np
import torch

from peanchor.pe import PEContext, create_pe
from tests.helpers.relative import offset_spread


def _pe(grid=(3, 4)):
    torch.manual_seed(0)
    pe = create_pe("string", PEContext(embed_dim=32, num_heads=2, depth=2, grid=grid))
    with torch.no_grad():
        pe.raw.normal_(0, 0.3)  # a basis that is not the identity
    return pe


def test_the_rotation_is_rope_after_the_cayley_basis() -> None:
    pe = _pe()
    hd, half = 16, 8
    mats = pe.rotation(1.0).mats.detach().double().numpy()  # (L, H, N, 1, hd, hd)
    freqs = pe.rope.freqs.detach().double().numpy()  # (2, L, H, hd/2)
    raw = pe.raw.detach().double().numpy()
    for layer in range(2):
        for head in range(2):
            s = raw[layer, head] - raw[layer, head].T
            p = (np.eye(hd) - s) @ np.linalg.inv(np.eye(hd) + s)
            np.testing.assert_allclose(p @ p.T, np.eye(hd), atol=1e-10)
            for t in range(12):
                y, x = divmod(t, 4)
                rope = np.zeros((hd, hd))
                for j in range(half):  # plane (j, j + hd/2) turned by x·fx_j + y·fy_j
                    a = x * freqs[0, layer, head, j] + y * freqs[1, layer, head, j]
                    rope[j, j], rope[j, j + half] = math.cos(a), -math.sin(a)
                    rope[j + half, j], rope[j + half, j + half] = math.sin(a), math.cos(a)
                np.testing.assert_allclose(mats[layer, head, t, 0], rope @ p, atol=2e-5)


def test_a_fresh_string_is_rope_mixed() -> None:
    ctx = PEContext(embed_dim=32, num_heads=2, depth=2, grid=(3, 4))
    torch.manual_seed(3)
    pe = create_pe("string", ctx)
    q = torch.randn(2, 2, 13, 16)
    tables = pe.rope.rotary(1.0).layer(1)
    torch.testing.assert_close(pe.rotation(1.0).layer(1).apply(q, 1), tables.apply(q, 1), rtol=1e-5, atol=1e-6)


def test_the_logit_depends_only_on_the_offset() -> None:
    pe = _pe(grid=(4, 4))
    with torch.no_grad():
        rot = pe.rotation(1.0).layer(1)
        assert offset_spread(lambda t: rot.apply(t, 1), (4, 4), 2, 16) < 1e-4
        half = pe.rotation(0.5).layer(1)  # α scales angles and S: still relative
        assert offset_spread(lambda t: half.apply(t, 1), (4, 4), 2, 16) < 1e-4
        assert pe.rotation(0.0) is None
