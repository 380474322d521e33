"""Which timm family a model is and which PE it has (peanchor/adapters/timm_pe.py): each wrapper takes its own
families' classes only, each block's probe norm is the norm that feeds its attention, and what peanchor does not
wrap is one line; tiny random models, nothing downloaded."""

from __future__ import annotations

import pytest
import torch

timm = pytest.importorskip("timm")

from peanchor.adapters import TimmBeit, TimmViT  # noqa: E402
from peanchor.adapters.timm_naflex import TimmNaFlex  # noqa: E402
from peanchor.adapters.timm_pe import SUPPORTED_FAMILIES, read_family, read_pe  # noqa: E402
from peanchor.core.errors import ConfigError  # noqa: E402

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)  # a 4x4 grid
NAFLEX = dict(patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10, pos_embed_grid_size=(4, 4))


def create(name: str, **extra: object) -> torch.nn.Module:
    if not timm.is_model(name):
        pytest.skip(f"{name} is not in timm {timm.__version__}")
    torch.manual_seed(0)
    return timm.create_model(name, pretrained=False, **dict(NAFLEX if name.startswith("naflex") else SMALL, **extra))


def wrap(cls: type, model: torch.nn.Module) -> object:
    return cls(model, grid=(4, 4)) if cls is TimmNaFlex else cls(model)


@pytest.mark.parametrize("cls", [TimmViT, TimmBeit, TimmNaFlex])
@pytest.mark.parametrize("name", ["vit_small_patch16_224", "beit_base_patch16_224", "naflexvit_base_patch16_gap"])
def test_each_wrapper_takes_its_own_familys_classes_only(cls: type, name: str) -> None:
    model = create(name)
    own = {TimmViT: "vit_", TimmBeit: "beit_", TimmNaFlex: "naflexvit_"}[cls]
    if name.startswith(own):
        assert wrap(cls, model).model is model
        return
    with pytest.raises(ConfigError) as refused:
        wrap(cls, model)
    line = str(refused.value)
    assert f"{type(model).__module__}.{type(model).__name__} is not supported" in line and "\n" not in line
    assert line.endswith("; ".join(SUPPORTED_FAMILIES))


@pytest.mark.parametrize(("name", "families", "family"), [
    ("vit_small_patch16_224", ("vit", "eva"), "vit"),
    ("deit_small_distilled_patch16_224", ("vit", "eva"), "vit"),
    ("vit_pwee_patch16_reg1_gap_256", ("vit", "eva"), "vit"),  # ParallelScalingBlock: its in_norm
    ("vit_small_patch16_rope_224", ("vit", "eva"), "eva"),
    ("beit_base_patch16_224", ("beit",), "beit"),
    ("naflexvit_base_patch16_gap", ("naflex",), "naflex"),
])  # fmt: skip
def test_the_probe_norm_is_the_norm_whose_output_the_attention_sees(name: str, families: tuple, family: str) -> None:
    """The probe norm's output, fed to the block's own attention, is the block's attention output (an independent
    reference: hooks on the attention module's input during timm's own forward)."""
    model = create(name).eval()
    found, norms = read_family(model, families)
    assert found == family and len(norms) == len(model.blocks)
    for block, norm in zip(model.blocks, norms, strict=True):
        attn = getattr(block, "attn", None)
        if attn is None:  # ParallelScalingBlock: attention and MLP in one module, fed by its in_norm
            assert norm == "in_norm"
            continue
        taken: dict[str, torch.Tensor] = {}
        handles = [getattr(block, norm).register_forward_hook(lambda _m, _a, out: taken.__setitem__("norm", out)),
                   attn.register_forward_pre_hook(lambda _m, args: taken.__setitem__("attn", args[0]))]  # fmt: skip
        with torch.no_grad():
            model(torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1)))
        for h in handles:
            h.remove()
        assert torch.equal(taken["norm"], taken["attn"])


def test_what_timms_forward_would_drop_or_peanchor_cannot_read_is_one_line() -> None:
    distilled = create("deit_small_distilled_patch16_224", reg_tokens=1)
    with pytest.raises(ConfigError, match="^a distilled timm ViT with register tokens is not supported$"):
        TimmViT(distilled)
    eva = create("vit_small_patch16_rope_224")
    eva.rope = torch.nn.Identity()  # a rotary module peanchor has no builder for
    with pytest.raises(ConfigError, match="^timm rotary embedding Identity is not supported; supported: "):
        TimmViT(eva)


@pytest.mark.parametrize(("name", "extra", "has_ape", "rope"), [
    ("vit_small_patch16_224", {}, True, None),
    ("vit_small_patch16_224", {"pos_embed": "none"}, False, None),
    ("vit_small_patch16_rope_224", {}, False, "rope"),
    ("vit_small_patch16_rope_mixed_ape_224", {}, True, "rope_mixed"),
    ("beit_base_patch16_224", {}, False, None),
    ("beit_base_patch16_224", {"use_abs_pos_emb": True}, True, None),
    ("naflexvit_base_patch16_parfac_gap", {}, True, None),
    ("naflexvit_base_patch16_gap", {"pos_embed": "none"}, False, None),
])  # fmt: skip
def test_the_pe_read_agrees_with_the_models_own_parameters(name: str, extra: dict, has_ape: bool, rope: str) -> None:
    model = create(name, **extra)
    family = read_family(model, ("vit", "eva", "beit", "naflex"))[0]
    pe, builder = read_pe(model, family)
    tables = [k for k, _ in model.named_parameters() if k.split(".")[-1].startswith("pos_embed")]
    assert pe.has_ape == has_ape == bool(tables) and pe.rope == rope and (builder is not None) == (rope is not None)
    bias = any("relative_position_bias_table" in k for k, _ in model.named_parameters())
    assert pe.scalable == (has_ape or rope is not None or bias)
