"""``pe_resample`` on the families whose position is a bias or a general rotation (ALiBi, LieRE, ComRoPE, STRING): their
parameters do not depend on the grid, so a model moved to another grid by ``rope_positions=extrapolate`` (the integer
coordinates run on) equals the same weights built at that grid; ``interpolate`` does not."""

from __future__ import annotations

import pytest
import torch

from peanchor.interventions import Intervention

GRIDLESS = ["alibi", "liere", "comrope", "string"]


def _logits(model, x, spec=""):
    with torch.no_grad():
        return model.forward_intermediates(x, Intervention.parse(spec) if spec else Intervention()).logits


@pytest.mark.parametrize("pe", GRIDLESS)
def test_extrapolated_to_another_grid_is_the_same_weights_built_there(pe: str, micro) -> None:
    model = micro(pe)
    big = micro(pe, img_size=24, seed=9)
    big.load_state_dict(model.state_dict())
    with torch.no_grad():
        for block in (*model.blocks, *big.blocks):
            block.attn.qkv.weight.mul_(20)  # peaked attention: position shows
    x = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    moved = _logits(model, x, "pe_resample:grid=6x6,rope_positions=extrapolate")
    torch.testing.assert_close(moved, _logits(big, x), rtol=0, atol=1e-6)
    squeezed = _logits(model, x, "pe_resample:grid=6x6,rope_positions=interpolate")
    assert not torch.allclose(squeezed, moved, atol=1e-4)
    own = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(2))
    assert torch.equal(_logits(model, own, "pe_resample:grid=4x4"), _logits(model, own))  # the own grid: identity


def test_a_model_without_a_pe_only_takes_the_other_grid(micro) -> None:
    model = micro("none")
    x = torch.randn(2, 3, 24, 24, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = model(x)  # the none model takes any grid as it is
    torch.testing.assert_close(_logits(model, x, "pe_resample:grid=6x6"), plain, rtol=0, atol=0)
