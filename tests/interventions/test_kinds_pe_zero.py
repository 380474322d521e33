"""``pe_zero`` on every PE family: it removes all position. Under it a model equals its own weights run without a PE
(to the bit), is permutation-equivariant on its patch tokens at every layer, and (trained briefly) has SSDC under
RPI ≈ 0 at every layer."""

from __future__ import annotations

import pytest
import torch

from peanchor.core.errors import ConfigError
from peanchor.interventions import Intervention, PEZero, random_permutation
from peanchor.pe import PE_NAMES, PE_REGISTRY

from tests.helpers.images import striped_scenes

CODE_POINTS = ("has_table", "has_rotary", "has_bias", "has_rotation")
#: Every registered PE with a positional code pe_zero reaches (relbias and peg have none: no edit removes them).
REMOVABLE = [pe for pe in PE_NAMES if any(getattr(PE_REGISTRY[pe], flag) for flag in CODE_POINTS)]
FAMILIES = ["fourier", "factorized", "alibi", "liere", "comrope", "string", "rope_ape", "rope_dinov3"]


def _lively(model: torch.nn.Module) -> torch.nn.Module:
    """Peaked attention, a unit-scale head and a PE whose terms are not small, so that position shows."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(20)
        torch.nn.init.normal_(model.head.weight)
        for p in model.pe.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(3)))
    return model


def _images(n: int = 3, size: int = 16) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def _run(model, x, edits=(), perm=None):
    with torch.no_grad():
        return model.forward_intermediates(x, Intervention(perm, edits=edits))


def test_every_family_is_removable() -> None:
    assert set(FAMILIES) <= set(REMOVABLE)


@pytest.mark.parametrize("pe", REMOVABLE)
def test_under_pe_zero_the_model_is_its_weights_without_a_pe(pe: str, micro) -> None:
    model, x = _lively(micro(pe)), _images()
    none = micro("none", seed=123)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("pe.")}
    none.load_state_dict(state)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(_run(model, x).logits, _run(model, x, perm=perm).logits, atol=1e-3)  # position shows
    zeroed = _run(model, x, (PEZero(),))
    plain = _run(none, x)
    assert torch.equal(zeroed.logits, plain.logits) and torch.equal(zeroed.tokens, plain.tokens)


@pytest.mark.parametrize("pe", REMOVABLE)
def test_under_pe_zero_permuting_the_patches_permutes_every_layers_tokens(pe: str, micro) -> None:
    model, x = _lively(micro(pe, depth=3)), _images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(2))
    base, moved = _run(model, x, (PEZero(),)), _run(model, x, (PEZero(),), perm)
    torch.testing.assert_close(moved.tokens, base.tokens[:, :, perm])  # (B, L, N, D): slot i holds content perm[i]
    torch.testing.assert_close(moved.logits, base.logits)


def test_a_model_without_a_code_is_one_line(micro) -> None:
    for pe in ("relbias", "peg", "none"):
        with pytest.raises(ConfigError, match=f"^pe_zero acts at .*, and peanchor:{pe} has none of them$"):
            _run(micro(pe), _images(), (PEZero(),))


# Each family's exact invariants above run in the development loop; training a model for this consequence of them
# does for a family of each code pe_zero removes (has_table, has_bias, has_rotation, has_rotary), the rest in CI.
TRAINED_IN_THE_LOOP = {"factorized", "alibi", "comrope", "rope_ape"}


def test_the_development_loop_trains_a_family_of_each_code() -> None:
    codes = {flag for pe in TRAINED_IN_THE_LOOP for flag in CODE_POINTS if getattr(PE_REGISTRY[pe], flag)}
    assert TRAINED_IN_THE_LOOP <= set(FAMILIES) and codes == set(CODE_POINTS)


@pytest.mark.parametrize("pe", [f if f in TRAINED_IN_THE_LOOP else pytest.param(f, marks=pytest.mark.slow)
                                for f in FAMILIES])  # fmt: skip
def test_under_pe_zero_ssdc_under_rpi_vanishes_at_every_layer_of_a_trained_model(pe: str, micro, fit_briefly) -> None:
    from peanchor.data import IMAGENET_MEAN, IMAGENET_STD, DataInfo, normalize
    from peanchor.metrics import SSDCAccumulator

    info = DataInfo(2, 32, IMAGENET_MEAN, IMAGENET_STD, ["a", "b"], "bands")
    model = fit_briefly(micro(pe, num_classes=2, img_size=32), *striped_scenes(256, seed=0), info, steps=20)  # 8x8 grid
    x = normalize(striped_scenes(128, seed=3)[0], info.mean, info.std)
    acc, g = SSDCAccumulator(model.grid), torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for s in range(0, len(x), 32):
            perm = random_permutation(model.num_patches, batch=32, generator=g)
            acc.update(model.forward_intermediates(x[s : s + 32], Intervention(perm, edits=(PEZero(),)),
                                                   head=False).tokens)  # fmt: skip
    ssdc = acc.compute().tolist()
    assert len(ssdc) == model.depth and max(abs(v) for v in ssdc) < 0.1, ssdc
