"""What every backend declares on the analysis interface (``peanchor.models.interface``), checked against what its
pass returns and against the wrapped library's own forward: the grid matches the patch tokens, ``num_prefix`` the
tokens in front of them, ``has_head`` the logits, ``pe_scalable`` whether α moves anything, and the hook points
agree with all of them. A model without the interface is refused in one line."""

from __future__ import annotations

import json

import pytest
import torch
from torch import Tensor, nn

from peanchor.core.errors import ConfigError
from peanchor.interventions import Intervention
from peanchor.models.interface import AnalysisInterface
from peanchor.pe import PE_NAMES


def sequence_length(module: nn.Module, run) -> int:
    """The length of the token sequence ``module`` (a block) is called with while ``run()`` runs."""
    seen: list[int] = []
    handle = module.register_forward_pre_hook(lambda _, args: seen.append(args[0].shape[1]))
    try:
        run()
    finally:
        handle.remove()
    return seen[0]


def check_declarations(model: AnalysisInterface, tokens_in_sequence: int, outputs: int) -> None:
    """``model``'s declarations against one pass. ``tokens_in_sequence``: the prefix and patch tokens each block
    sees, and ``outputs``: the width of the head's output, both read from the library's own forward."""
    rows, cols = model.grid
    x = torch.randn(2, 3, *model.img_size, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model.forward_intermediates(x)
        scaled = model.forward_intermediates(x, Intervention(None, 0.5))
    assert out.tokens is not None and out.logits is not None
    # the grid is the image in patches, and the tokens hold one per patch and layer
    assert model.img_size[0] % rows == 0 and model.img_size[0] // rows == model.img_size[1] // cols
    assert out.tokens.shape[:3] == (2, model.depth, rows * cols) and model.num_patches == rows * cols
    # the prefix tokens are the rest of what each block sees
    assert model.num_prefix == tokens_in_sequence - rows * cols >= 0
    # a head gives num_classes scores; without one the pass gives the features
    assert out.logits.shape == (2, outputs)
    assert model.has_head == (model.num_classes > 0) and (model.num_classes == outputs) == model.has_head
    # α moves the pass exactly when the PE says it is scalable
    moved = not (torch.equal(out.tokens, scaled.tokens) and torch.equal(out.logits, scaled.logits))
    assert moved == model.pe_scalable
    if model.has_attention_weights:
        maps = model.attention_maps(x)  # (B, L, H, T, T)
        assert maps.shape[1] == model.depth and maps.shape[-2:] == (tokens_in_sequence,) * 2
    else:
        with pytest.raises(ValueError, match="cannot hand out its attention weights"):
            model.attention_maps(x)
    hooks = model.hook_points
    assert (hooks.grid, hooks.num_prefix, hooks.depth) == (model.grid, model.num_prefix, model.depth)
    assert isinstance(model.pe_name, str) and model.pe_name
    assert json.loads(json.dumps(model.model_args)) == model.model_args


@pytest.mark.parametrize("pe", PE_NAMES)
def test_peanchor_vit_declares_what_its_pass_returns(pe, micro):
    from peanchor.pe import PE_REGISTRY

    model = micro(pe, num_classes=3)
    with torch.no_grad():
        seen = sequence_length(model.blocks[0], lambda: model(torch.zeros(1, 3, *model.img_size)))
    check_declarations(model, seen, model.model_args["num_classes"])
    assert model.pe_name == pe and model.pe_scalable == PE_REGISTRY[pe].scalable
    assert model.mean is None and not model.can_restrict_classes  # from create_model: no normalisation carried


TIMM = [  # (timm name, create_model kwargs beyond the tiny size)
    ("vit_small_patch16_224", {}),  # CLS, a learned table
    ("vit_small_patch16_224", {"pos_embed": "none"}),  # no PE: α means nothing
    ("vit_small_patch16_224", {"class_token": False, "global_pool": "avg"}),  # no prefix at all
    ("vit_small_patch16_224", {"num_classes": 0}),  # no head: the pass gives the pooled features
    ("deit_small_distilled_patch16_224", {}),  # CLS and distillation tokens
    ("vit_base_patch16_reg4_gap_256", {}),  # register tokens
    ("vit_small_patch16_rope_mixed_224", {}),  # Eva, mixed RoPE
    ("vit_small_patch16_dinov3", {}),  # Eva, DINOv3 RoPE with registers
]


@pytest.mark.parametrize("name, extra", TIMM, ids=[f"{n}{''.join(f'-{k}' for k in e)}" for n, e in TIMM])
def test_timm_adapter_declares_what_timm_computes(name, extra):
    timm = pytest.importorskip("timm")
    from peanchor.adapters import load_timm_model

    if not timm.is_model(name):
        pytest.skip(f"{name} is not in timm {timm.__version__}")
    torch.manual_seed(0)
    kwargs = {"img_size": 32, "patch_size": 8, "depth": 2, "embed_dim": 64, "num_heads": 4, "num_classes": 7, **extra}
    model = load_timm_model(name, **kwargs)
    x = torch.zeros(1, 3, 32, 32)
    with torch.no_grad():
        every_token = model.model.forward_features(x).shape[1]  # timm's own: prefix tokens and patches
        width = model.model(x).shape[-1]  # its classes, or its features without a head
    check_declarations(model, every_token, width)
    assert model.has_head == (kwargs["num_classes"] > 0) and model.can_restrict_classes
    assert model.pe_scalable == (extra.get("pos_embed") != "none")


def hf_model(name: str) -> nn.Module:
    """A tiny random transformers model of class ``name``, with a table and q/k large enough for α to show."""
    T = pytest.importorskip("transformers")
    size = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=32,
                patch_size=8)  # fmt: skip
    family = {"ViT": T.ViTConfig, "DeiT": T.DeiTConfig, "Dinov2WithRegisters": T.Dinov2WithRegistersConfig,
              "CLIP": T.CLIPVisionConfig, "Siglip": T.SiglipVisionConfig, "DINOv3ViT": T.DINOv3ViTConfig}  # fmt: skip
    prefix = max((p for p in family if name.startswith(p)), key=len)
    extra = {"num_register_tokens": 2} if "Registers" in prefix or prefix == "DINOv3ViT" else {}
    torch.manual_seed(0)
    config = family[prefix](num_labels=5, **size, **extra)
    model = getattr(T, name)(config).eval()
    for key, param in model.named_parameters():
        if key.endswith(("position_embeddings", "position_embedding.weight", "q_proj.weight", "k_proj.weight")):
            nn.init.normal_(param, std=0.5)
    return model


HF = ["ViTForImageClassification", "DeiTForImageClassificationWithTeacher", "Dinov2WithRegistersModel",
      "Dinov2WithRegistersForImageClassification", "CLIPVisionModel", "SiglipVisionModel", "DINOv3ViTModel"]


@pytest.mark.parametrize("name", HF)
def test_transformers_adapter_declares_what_transformers_computes(name):
    from peanchor.adapters.hf_vit import HFViT

    inner = hf_model(name)
    model = HFViT(inner)
    x = torch.zeros(1, 3, 32, 32)
    with torch.no_grad():
        native = inner(pixel_values=x, output_hidden_states=True)
    every_token = native.hidden_states[-1].shape[1]  # transformers' own sequence: prefix tokens and patches
    head: Tensor | None = getattr(native, "logits", None)
    width = head.shape[-1] if head is not None else native.pooler_output.shape[-1]
    check_declarations(model, every_token, width)
    assert model.has_head == ("ForImageClassification" in name) and model.pe_scalable


def test_a_model_without_the_interface_is_refused_in_one_line():
    import peanchor
    from peanchor.analysis.evalset import EvalSet
    from peanchor.analysis.evaluate import evaluate_model
    from peanchor.data import DataInfo

    info = DataInfo(num_classes=2, img_size=16, mean=(0.5,) * 3, std=(0.5,) * 3, name="tensors")
    images, labels = torch.zeros(4, 3, 16, 16, dtype=torch.uint8), torch.tensor([0, 1, 0, 1])
    foreign = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 2))
    with pytest.raises(ConfigError, match="AnalysisInterface") as refused:
        evaluate_model(foreign, EvalSet.from_tensors(images, labels, info), info=info, device="cpu", progress=False)
    assert "\n" not in str(refused.value)
    with pytest.raises(ConfigError, match="cannot analyse a torch.nn.modules.container.Sequential") as refused:
        peanchor.analyze(foreign, images, labels, mean=info.mean, std=info.std, progress=False)
    assert "\n" not in str(refused.value)


def test_a_backend_that_leaves_a_declaration_out_cannot_be_built():
    class Partial(AnalysisInterface, nn.Module):
        grid, depth, num_prefix = (2, 2), 1, 1

        def forward_intermediates(self, images, intervention=None, *, layers=None, head=True, attention=None):
            raise AssertionError("never called")

    with pytest.raises(TypeError, match="abstract") as refused:
        Partial()
    for missing in ("has_attention_weights", "hook_points", "img_size", "model_args", "num_classes", "pe_name",
                    "pe_scalable"):  # fmt: skip
        assert missing in str(refused.value)
