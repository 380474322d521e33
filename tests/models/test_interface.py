"""The model interface an analysis reads (``forward_intermediates`` under an ``Intervention``) and the one dataclass
of model arguments (``ViTArgs``) behind ``create_model``, ``--set model.overrides.*`` and the checkpoints."""

from __future__ import annotations

import dataclasses
import typing

import pytest
import torch

from peanchor.checkpoint.files import load_model, read_metadata, save_model
from peanchor.core.errors import ConfigError
from peanchor.interventions import Intervention, random_permutation
from peanchor.models import create_model
from peanchor.models.args import ARCH_FIELDS, Architecture, ViTArgs
from peanchor.pe import PE_NAMES
from peanchor.training.config import ModelOverrides, TrainConfig, apply_overrides


def timm_micro() -> torch.nn.Module:
    pytest.importorskip("timm")
    from peanchor.adapters import load_timm_model

    torch.manual_seed(0)
    return load_timm_model("vit_small_patch16_rope_mixed_224", img_size=16, patch_size=4, depth=3, embed_dim=32,
                           num_heads=2, num_classes=5)  # fmt: skip


def hf_micro(family: str):
    transformers = pytest.importorskip("transformers")
    from peanchor.adapters.hf_vit import HFViT

    def make() -> torch.nn.Module:
        torch.manual_seed(0)
        size = dict(hidden_size=32, num_hidden_layers=3, num_attention_heads=2, intermediate_size=64, image_size=16,
                    patch_size=4)  # fmt: skip
        if family == "dinov2":  # a learned table, CLS and register tokens
            config = transformers.Dinov2WithRegistersConfig(num_register_tokens=2, num_labels=5, **size)
            model = transformers.Dinov2WithRegistersForImageClassification(config)
        else:  # rotary, CLS and register tokens
            model = transformers.DINOv3ViTModel(transformers.DINOv3ViTConfig(num_register_tokens=2, **size))
        for key, param in model.named_parameters():  # a table and q/k that the interventions visibly move
            if key.endswith(("position_embeddings", "q_proj.weight", "k_proj.weight")):
                torch.nn.init.normal_(param, std=0.5)
        return HFViT(model.eval())

    return make


MODELS = [*(pytest.param(pe, id=pe) for pe in PE_NAMES), pytest.param(timm_micro, id="timm"),
          pytest.param(hf_micro("dinov2"), id="hf-dinov2"), pytest.param(hf_micro("dinov3"), id="hf-dinov3")]


@pytest.fixture
def make(request, micro):
    """``make()``: the model a test is parametrised with, from MODELS (a PE's name stands for its vit_micro)."""
    return request.param if callable(request.param) else lambda: micro(request.param)


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("make", MODELS, indirect=True)
def test_one_pass_gives_what_each_convenience_method_gives(make, images):
    model = make()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(3))
    iv = Intervention(perm, 0.5)
    with torch.no_grad():
        full = model.forward_intermediates(images, iv)
        assert full.logits is not None and full.tokens is not None
        assert full.tokens.shape[:3] == (2, model.depth, model.num_patches)
        assert torch.equal(full.logits, model(images, token_perm=perm, pe_scale=0.5))
        assert torch.equal(full.tokens, model.spatial_tokens(images, token_perm=perm, pe_scale=0.5))
        # layers=0: logits only; head=False: the pass stops after the last probe asked for, with the same values
        only_logits = model.forward_intermediates(images, iv, layers=0)
        assert only_logits.tokens is None and torch.equal(only_logits.logits, full.logits)
        for k in range(1, model.depth + 1):
            early = model.forward_intermediates(images, iv, layers=k, head=False)
            late = model.forward_intermediates(images, iv, layers=k)
            assert early.logits is None and torch.equal(early.tokens, full.tokens[:, :k])
            assert torch.equal(late.logits, full.logits) and torch.equal(late.tokens, full.tokens[:, :k])


@pytest.mark.parametrize("make", MODELS, indirect=True)
def test_no_intervention_is_tokens_in_order_at_alpha_one(make, images):
    model = make()
    with torch.no_grad():
        default = model.forward_intermediates(images)
        explicit = model.forward_intermediates(images, Intervention(torch.arange(model.num_patches), 1.0))
        scaled = model.forward_intermediates(images, Intervention(pe_scale=0.0))
    assert torch.equal(default.logits, explicit.logits) and torch.equal(default.tokens, explicit.tokens)
    moved = not torch.equal(default.logits, scaled.logits)
    assert moved == (getattr(model, "pe_name", "none") not in ("none",))


@pytest.mark.parametrize("make", MODELS[:1] + MODELS[-1:], indirect=True)
def test_bad_layer_counts_are_refused(make, images):
    model = make()
    with pytest.raises(ValueError, match="layers must be in"):
        model.forward_intermediates(images, layers=model.depth + 1)
    with pytest.raises(ValueError, match="nothing to compute"):
        model.forward_intermediates(images, layers=0, head=False)


def test_the_overrides_config_accepts_exactly_the_architecture_fields_with_their_types():
    hints = typing.get_type_hints(ModelOverrides)
    assert tuple(hints) == ARCH_FIELDS == tuple(f.name for f in dataclasses.fields(Architecture))
    assert hints == typing.get_type_hints(Architecture)
    items = ["model.overrides.depth=3", "model.overrides.head_drop_rate=null", "model.overrides.qkv_bias=false"]
    config = apply_overrides(TrainConfig(), None, items)
    assert config.model.overrides == {"depth": 3, "head_drop_rate": None, "qkv_bias": False}
    with pytest.raises(ConfigError, match="model.overrides.depth"):
        apply_overrides(TrainConfig(), None, ["model.overrides.depth=1.5"])
    with pytest.raises(ConfigError, match="width"):
        apply_overrides(TrainConfig(), None, ["model.overrides.width=3"])


def test_the_checkpoint_stores_the_args_and_rebuilds_them(tmp_path):
    model = create_model("vit_micro", pe="ape", num_classes=4, depth=3, pe_kwargs={"init_std": 0.1})
    assert isinstance(model.args, ViTArgs) and model.args.depth == 3 and model.args.embed_dim == 32
    assert model.model_args == model.args.to_dict()
    path = save_model(model, tmp_path / "m.safetensors")
    assert read_metadata(path)["model_args"] == model.args.to_dict()
    loaded = load_model(path)
    assert loaded.args == model.args
    for a, b in zip(loaded.state_dict().values(), model.state_dict().values()):
        assert torch.equal(a, b)


def test_a_model_is_built_from_its_args_and_carries_them(tmp_path):
    """``VisionTransformer(args: ViTArgs)``: the arguments are spelled once, in ViTArgs, and the model keeps them, so
    a model built without create_model saves and loads like any other; anything else is refused in one line."""
    from peanchor.checkpoint.files import load_model
    from peanchor.models import VisionTransformer, ViTArgs

    args = ViTArgs(name="vit_micro", pe="rope", num_classes=2, img_size=8, patch_size=4, embed_dim=8, depth=1, num_heads=2)
    model = VisionTransformer(args)
    assert model.args is args and model.model_args == args.to_dict()
    loaded = load_model(save_model(model, tmp_path / "m.safetensors"))
    assert loaded.args == args
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), loaded.state_dict().values()))
    with pytest.raises(TypeError, match="takes a ViTArgs"):
        VisionTransformer(args.to_dict())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="no model_args"):
        save_model(torch.nn.Linear(2, 2), tmp_path / "unused.safetensors")
