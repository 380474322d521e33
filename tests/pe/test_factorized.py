"""Factorized row + column tables (NaViT): slot (r, c) gets row[r] + col[c], as a loop, and equal to timm's NaFlexViT
``factorized`` position embedding on shared weights."""

from __future__ import annotations

import pytest
import torch

from peanchor.pe import PEContext, create_pe


def test_the_code_is_row_plus_column_and_the_prefix_gets_none() -> None:
    ctx = PEContext(embed_dim=8, num_heads=2, depth=1, grid=(3, 4))
    pe = create_pe("factorized", ctx)
    prefix, patches = pe.table_rows(1.0)
    assert prefix is None and patches.shape == (1, 12, 8)
    for t in range(12):
        r, c = divmod(t, 4)
        torch.testing.assert_close(patches[0, t], pe.row[0, r] + pe.col[0, c], rtol=0, atol=0)
    x = torch.randn(2, 13, 8)
    out = pe.add(x, 0.5)
    assert torch.equal(out[:, 0], x[:, 0])
    torch.testing.assert_close(out[:, 1:], x[:, 1:] + 0.5 * patches, rtol=0, atol=1e-7)


def test_equal_to_timms_naflex_factorized_embedding_on_shared_weights() -> None:
    naflex = pytest.importorskip("timm.models.naflexvit")
    ctx = PEContext(embed_dim=16, num_heads=2, depth=1, grid=(3, 5))
    pe = create_pe("factorized", ctx)
    theirs = naflex.NaFlexEmbeds(patch_size=4, embed_dim=16, pos_embed="factorized", pos_embed_grid_size=(3, 5),
                                 class_token=False)  # fmt: skip
    with torch.no_grad():
        theirs.pos_embed_y.copy_(pe.row)
        theirs.pos_embed_x.copy_(pe.col)
        x = torch.zeros(2, 15, 16)
        theirs._apply_factorized_pos_embed(x, grid_size=[3, 5])  # in place
        assert torch.equal(x, pe.table_rows(1.0)[1].expand(2, -1, -1))
