"""The model's own forward split around its layers (peanchor.adapters.hf_split): up to the first layer it is the
stream transformers' own forward hands layer 0; the layers called with what it hands them give transformers' own
hidden states; from the last layer's output on it gives transformers' own logits (or pooled features); and every
stand-in is gone after the call, a user's own replacement of a method included."""

from __future__ import annotations

import pytest
import torch

T = pytest.importorskip("transformers")

from peanchor.adapters.hf_split import first_layer_input, from_last_layer, shadowed  # noqa: E402
from peanchor.adapters.hf_vit import HFViT  # noqa: E402
from tests.adapters.test_hf_vit import build, images  # noqa: E402

CLASSES = ["ViTForImageClassification", "DeiTForImageClassificationWithTeacher", "Dinov2WithRegistersModel",
           "CLIPForImageClassification", "SiglipVisionModel", "DINOv3ViTModel", "BeitForImageClassification"]


@pytest.mark.parametrize("name", CLASSES)
def test_the_split_forward_is_transformers_own_forward(name: str) -> None:
    model = build(name)
    wrapped = HFViT(model)
    backbone, path = wrapped._backbone, wrapped.family.layers
    x = images()
    with torch.no_grad():
        own = model(pixel_values=x, output_hidden_states=True)
        given = first_layer_input(model, backbone, path, x)
        hidden = given.hidden
        torch.testing.assert_close(hidden, own.hidden_states[0], rtol=0, atol=0)
        for i, layer in enumerate(wrapped._layers):
            hidden = layer(hidden, *given.args, **given.kwargs)
            torch.testing.assert_close(hidden, own.hidden_states[i + 1], rtol=0, atol=0)
        out = from_last_layer(model, backbone, path, hidden, wrapped.img_size)
    theirs, ours = (own.logits, out.logits) if wrapped.has_head else (own.pooler_output, out.pooler_output)
    torch.testing.assert_close(ours, theirs, rtol=0, atol=0)
    assert list(backbone.get_submodule(path)) == list(wrapped._layers) and "forward" not in vars(backbone.embeddings)


def test_what_the_encoder_hands_the_layers_is_read_at_the_grid_of_the_pixels() -> None:
    """DINOv3's (cos, sin) hold one row per patch of the pixels given, whatever the embeddings hand on."""
    model = build("DINOv3ViTModel")
    wrapped = HFViT(model)
    stream = torch.zeros(2, wrapped.num_prefix + 36, 32)
    with torch.no_grad():
        given = first_layer_input(model, wrapped._backbone, wrapped.family.layers, torch.zeros(2, 3, 48, 48),
                                  embedded=stream)  # fmt: skip
    cos, sin = given.kwargs["position_embeddings"]
    assert given.hidden is stream and cos.shape == sin.shape == (36, 8)


def test_a_method_shadowed_for_a_call_is_put_back_as_the_instance_had_it() -> None:
    module = torch.nn.Linear(2, 2)
    with shadowed(module, "forward", lambda x: x):
        assert torch.equal(module(torch.ones(1, 2)), torch.ones(1, 2))
    assert "forward" not in vars(module)
    own = lambda x: x * 0  # noqa: E731  (a user's own replacement, as tests/audit patch faults in)
    module.forward = own
    with pytest.raises(KeyError), shadowed(module, "forward", lambda x: x):
        raise KeyError("a failing call")
    assert module.forward is own


def test_a_pass_leaves_the_user_s_own_replacements_in_place() -> None:
    """A pass with an edited table stands in for the embeddings' forward and interpolate_pos_encoding; afterwards
    the instance has what it had, and the next plain pass runs it."""
    from peanchor.interventions import Intervention

    model = build("ViTForImageClassification")
    wrapped = HFViT(model)
    embeddings = wrapped._backbone.embeddings
    real = embeddings.forward
    embeddings.forward = lambda *a, **k: real(*a, **k) * 2.0  # the user's own embeddings, kept by every pass
    x = images()
    with torch.no_grad():
        doubled = model(pixel_values=x).logits
        wrapped.forward_intermediates(x, Intervention.parse("pe_zero"))
        torch.testing.assert_close(wrapped(x), doubled, rtol=0, atol=0)
    assert "interpolate_pos_encoding" not in vars(embeddings)
