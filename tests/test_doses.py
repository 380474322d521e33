"""``forward_doses``: the base pass and one pass per dose, each equal (bit for bit) to its own
``forward_intermediates`` call, on every layer setting, with and without RPI, for edits of every hook-point family."""

from __future__ import annotations

import pytest
import torch

from peanchor.interventions import Intervention, forward_doses, random_permutation

DOSES = {
    "rope": ["rope_planes:freqs=none", "rope_planes:freqs=0", "rope_planes:axis=x,freqs=0-1", "head_ablate:heads=0",
             "patch:layer=1,donor=rpi", "pe_resample:grid=4x4"],
    "ape": ["pe_zero", "pe_shuffle:seed=3", "head_ablate:layers=1", "patch:site=mlp,layer=0", "pe_resample:grid=4x4"],
}  # fmt: skip


@pytest.mark.parametrize("pe", sorted(DOSES))
@pytest.mark.parametrize(("layers", "head"), [(None, True), (0, True), (2, False)])
@pytest.mark.parametrize("rpi", [False, True])
def test_every_output_is_the_separate_call(micro, pe, layers, head, rpi) -> None:
    model = micro(pe, num_classes=4)
    images = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    perm = random_permutation(16, generator=torch.Generator().manual_seed(2)) if rpi else None
    base = Intervention.parse("head_ablate:layers=0,heads=1", token_perm=perm)
    doses = [Intervention(perm, 1.0, base.edits + Intervention.parse(d).edits) for d in DOSES[pe]]
    plain, outs = forward_doses(model, images, base, doses, layers=layers, head=head)
    assert len(outs) == len(doses)
    for iv, out in zip((base, *doses), (plain, *outs)):
        alone = model.forward_intermediates(images, iv, layers=layers, head=head)
        for got, want in ((out.logits, alone.logits), (out.tokens, alone.tokens)):
            assert (got is None) == (want is None)
            if want is not None:
                assert torch.equal(got, want)
    # the doses differ from the base (the check above is not comparing a pass with itself)
    if head:
        assert any(not torch.equal(o.logits, plain.logits) for o in outs)


def test_no_doses_is_the_base_pass_alone(micro) -> None:
    model = micro("ape", num_classes=4)
    images = torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(0))
    plain, outs = forward_doses(model, images, Intervention(), [])
    assert outs == []
    assert torch.equal(plain.logits, model.forward_intermediates(images, Intervention()).logits)
