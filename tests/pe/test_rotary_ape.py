"""RoPE + APE (Heo et al. 2024; timm's ``vit_*_rope_mixed_ape_224``): the learned table added (CLS row included) and
RoPE-Mixed's rotation, equal to timm's ``RotaryEmbeddingMixed`` on shared frequencies (its interleaved channel pairs
(2j, 2j+1) are our pairs (j, j + hd/2)); α scales both; ``pe_zero`` removes both."""

from __future__ import annotations

import pytest
import torch

from peanchor.pe import PEContext, create_pe
from tests.helpers.relative import offset_spread


def _ctx(grid=(3, 4)) -> PEContext:
    return PEContext(embed_dim=32, num_heads=2, depth=2, grid=grid)


def test_the_table_is_added_cls_row_included() -> None:
    pe = create_pe("rope_ape", _ctx())
    x = torch.randn(2, 13, 32)
    torch.testing.assert_close(pe.add(x, 1.0), x + pe.table, rtol=0, atol=0)
    prefix, patches = pe.table_rows(0.5)
    torch.testing.assert_close(torch.cat((prefix, patches), dim=1), 0.5 * pe.table, rtol=0, atol=0)


def test_the_rotation_equals_timms_rotary_embedding_mixed_on_shared_frequencies() -> None:
    layers = pytest.importorskip("timm.layers.pos_embed_sincos")
    pe = create_pe("rope_ape", _ctx())
    theirs = layers.RotaryEmbeddingMixed(dim=32, depth=2, num_heads=2, feat_shape=[3, 4])
    with torch.no_grad():
        theirs.freqs.copy_(pe.rope.freqs)  # (2, L, H, hd/2): x (columns) first, then y (rows)
        emb = theirs.get_embed()  # (L, H, N, 2 hd): sin, cos, interleaved pairs
        q = torch.randn(3, 2, 12, 16)
        order = torch.stack((torch.arange(8), torch.arange(8) + 8), dim=1).flatten()  # ours → interleaved
        for layer in range(2):
            ours = pe.rotary(1.0).layer(layer).apply(torch.cat((torch.zeros(3, 2, 1, 16), q), dim=2), 1)[:, :, 1:]
            timm_out = layers.apply_rot_embed_cat(q[..., order], emb[layer])  # (B, H, N, hd), interleaved
            torch.testing.assert_close(ours[..., order], timm_out, rtol=1e-5, atol=1e-6)


def test_the_rotation_alone_is_relative_and_the_table_is_not() -> None:
    pe = create_pe("rope_ape", _ctx((4, 4)))
    with torch.no_grad():
        tables = pe.rotary(1.0).layer(0)
        assert offset_spread(lambda t: tables.apply(t, 1), (4, 4), 2, 16) < 1e-4

        def with_table(t):  # the table (projected as if q = k = token + code) makes the logits absolute
            code = pe.table[0, 1:, :16]  # (N, hd)
            return tables.apply(t + torch.cat((torch.zeros(1, 16), code))[None, None], 1)

        assert offset_spread(with_table, (4, 4), 2, 16) > 1e-3


def test_options() -> None:
    pe = create_pe("rope_ape", _ctx(), rope="axial")
    assert pe.rotary(1.0).groups == 2
    with pytest.raises(ValueError, match="rope_ape rope must be one of mixed, axial"):
        create_pe("rope_ape", _ctx(), rope="golden")
