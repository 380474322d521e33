"""DINOv3's RoPE against timm's ``RotaryEmbeddingDinoV3`` (which matches DINOv3's own RopePositionEmbedding): the
same tables in evaluation and, from the same random state, in training; the augmentation acts in training only."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.pe import PEContext, create_pe
from tests.helpers.relative import offset_spread


def _pe(grid=(3, 4), **kw):
    return create_pe("rope_dinov3", PEContext(embed_dim=64, num_heads=2, depth=2, grid=grid), **kw)


def test_the_angles_are_dinov3s_over_normalised_coordinates() -> None:
    pe = _pe().eval()
    tables = pe.rotary(1.0)
    quarter = 8  # hd = 32
    for t in range(12):
        r, c = divmod(t, 4)
        y, x = 2 * (r + 0.5) / 3 - 1, 2 * (c + 0.5) / 4 - 1  # the patch centre in [-1, 1]
        for j in range(quarter):
            period = 100 ** (2 * j / 16)
            for channel, coord in ((j, y), (quarter + j, x), (2 * quarter + j, y), (3 * quarter + j, x)):
                assert abs(float(tables.sin[0, 0, t, channel]) - math.sin(2 * math.pi * coord / period)) < 1e-5


@pytest.mark.parametrize("training", [False, True])
def test_equal_to_timms_rotary_embedding_dinov3(training: bool) -> None:
    layers = pytest.importorskip("timm.layers.pos_embed_sincos")
    kw = {"shift": 0.1, "jitter": 1.5, "rescale": 2.0}
    pe = _pe(**kw).train(training)
    theirs = layers.RotaryEmbeddingDinoV3(dim=32, temperature=100.0, feat_shape=[3, 4], shift_coords=0.1,
                                          jitter_coords=1.5, rescale_coords=2.0).train(training)  # fmt: skip
    torch.manual_seed(5)
    emb = theirs.get_embed()  # (N, 2 hd): sin, cos in the rotate-half layout
    torch.manual_seed(5)
    tables = pe.rotary(1.0)
    sin, cos = emb.chunk(2, dim=-1)
    # timm builds the grid in float32, we in float64 then round: the augmented angles (up to ~25 rad) differ by ulps
    tol = 1e-5 if training else 1e-6
    torch.testing.assert_close(tables.sin[0, 0], sin, rtol=0, atol=tol)
    torch.testing.assert_close(tables.cos[0, 0], cos, rtol=0, atol=tol)


def test_the_augmentation_acts_in_training_only() -> None:
    pe = _pe(shift=0.2, jitter=1.2)
    pe.train()
    draws = [pe.rotary(1.0).sin for _ in range(2)]
    assert not torch.equal(draws[0], draws[1])  # a new transform per pass
    pe.eval()
    torch.manual_seed(0)
    first = pe.rotary(1.0).sin
    torch.manual_seed(1)
    assert torch.equal(pe.rotary(1.0).sin, first)  # evaluation ignores the random state
    torch.testing.assert_close(pe.coords, _pe().coords)  # the grid's coordinates are never changed


def test_relative_in_training_and_in_evaluation() -> None:
    pe = _pe(grid=(4, 4))
    for mode in (True, False):
        tables = pe.train(mode).rotary(1.0).layer(0)
        assert offset_spread(lambda t: tables.apply(t, 1), (4, 4), 2, 32) < 1e-4


def test_bad_options_are_one_line() -> None:
    with pytest.raises(ValueError, match="rope_dinov3 jitter must be a number >= 1 or None, got 0.5"):
        _pe(jitter=0.5)
