"""The rotary tables rotate each channel pair of the patch tokens by its angle and leave the prefix as it is: checked
against a loop over the pairs, to the bit, forwards and backwards (the rotation is written over the whole sequence
for speed, and must not move a trained model's weights)."""

from __future__ import annotations

import pytest
import torch

from peanchor.pe.base import RotaryTables


def _rotated_pair_by_pair(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, groups: int,
                          num_prefix: int) -> torch.Tensor:  # fmt: skip
    """The reference: channel j of a chunk pairs with j + chunk/2; (a, b) -> (a·cos + (-b)·sin, b·cos + a·sin)."""
    out = t.clone()
    chunk = t.shape[-1] // groups
    half = chunk // 2
    for g in range(groups):
        for j in range(half):
            i, k = g * chunk + j, g * chunk + j + half
            a, b = t[:, :, num_prefix:, i], t[:, :, num_prefix:, k]
            out[:, :, num_prefix:, i] = a * cos[..., i] + (-b) * sin[..., i]
            out[:, :, num_prefix:, k] = b * cos[..., k] + a * sin[..., k]
    return out


@pytest.mark.parametrize(("groups", "num_prefix", "per_head"), [(2, 1, False), (2, 0, False), (1, 1, True),
                                                                 (1, 5, True)])  # fmt: skip
def test_rotary_tables_rotate_every_pair_to_the_bit(groups, num_prefix, per_head):
    g = torch.Generator().manual_seed(groups * 10 + num_prefix)
    b, h, n, hd = 3, 4, 16, 16
    shape = (h, n, hd) if per_head else (1, 1, n, hd)
    angles = torch.rand(shape, generator=g) * 6
    if not per_head:  # axial RoPE's layout: both channels of a pair turn by the same angle
        half = hd // (2 * groups)
        angles = angles.unflatten(-1, (groups, 2, half))[..., :1, :].expand(*shape[:-1], groups, 2, half).flatten(-3)
    angles.requires_grad_(per_head)  # learned tables (RoPE-Mixed) take gradients too
    qkv = torch.randn(b, num_prefix + n, 3, h, hd, generator=g, requires_grad=True)
    upstream = torch.randn(b, h, num_prefix + n, hd, generator=g)

    def run(rotate):
        qkv.grad = angles.grad = None
        t = qkv.permute(2, 0, 3, 1, 4)[0]  # q as the attention hands it over: a strided view
        out = rotate(t, angles.cos(), angles.sin())
        out.backward(upstream)
        return out.detach(), qkv.grad.clone(), None if angles.grad is None else angles.grad.clone()

    ours = run(lambda t, c, s: RotaryTables(c, s, groups).apply(t, num_prefix))
    reference = run(lambda t, c, s: _rotated_pair_by_pair(t, c, s, groups, num_prefix))
    assert torch.equal(ours[0], reference[0])
    assert torch.equal(ours[0][:, :, :num_prefix], qkv.detach().permute(2, 0, 3, 1, 4)[0][:, :, :num_prefix])
    assert torch.equal(ours[1], reference[1])
    if per_head:
        torch.testing.assert_close(ours[2], reference[2], rtol=1e-6, atol=1e-6)
