"""Learnable Fourier features against Li et al. 2021, eqs. (2)-(3): r_x = (1/√F)[cos(x W_rᵀ) ‖ sin(x W_rᵀ)],
PE_x = GELU(r_x W_1 + B_1) W_2 + B_2, written as a loop in float64."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.pe import PEContext, create_pe


def test_the_code_is_the_papers_equations() -> None:
    ctx = PEContext(embed_dim=8, num_heads=2, depth=1, grid=(3, 4))
    pe = create_pe("fourier", ctx, features=6, hidden=5)
    prefix, patches = pe.table_rows(1.0)
    assert prefix is None and patches.shape == (1, 12, 8)
    w = pe.freqs.detach().double()  # (3, 2)
    lin1, lin2 = pe.mlp[0], pe.mlp[2]
    for t in range(12):
        x = divmod(t, 4)  # (row, col)
        angles = [x[0] * w[k, 0] + x[1] * w[k, 1] for k in range(3)]
        r = torch.tensor([math.cos(a) for a in angles] + [math.sin(a) for a in angles], dtype=torch.float64) / math.sqrt(6)
        hidden = r @ lin1.weight.double().T + lin1.bias.double()
        hidden = 0.5 * hidden * (1 + torch.erf(hidden / math.sqrt(2)))  # GELU
        expect = hidden @ lin2.weight.double().T + lin2.bias.double()
        torch.testing.assert_close(patches[0, t].double(), expect, rtol=1e-5, atol=1e-6)


def test_options_are_checked() -> None:
    ctx = PEContext(embed_dim=8, num_heads=2, depth=1, grid=(3, 4))
    with pytest.raises(ValueError, match="fourier features must be a positive even number"):
        create_pe("fourier", ctx, features=5)
    with pytest.raises(ValueError, match="cannot take theta; it takes features, hidden, gamma"):
        create_pe("fourier", ctx, theta=10.0)
