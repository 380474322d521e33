"""The transformers adapter (peanchor.adapters.hf_vit) against transformers itself, on small random configs of every
supported family: at the identity and α = 1 the logits (or pooled features) and the probe tokens are transformers'
own; RPI is the model's own forward on an image whose patches were moved; α scales the table; without a position
signal the model is permutation equivariant."""

from __future__ import annotations

import copy
import json

import pytest
import torch

T = pytest.importorskip("transformers")

from peanchor.adapters import load_hf_model
from peanchor.adapters.hf_vit import SUPPORTED_CLASSES, HFViT  # noqa: E402
from peanchor.core.errors import CheckpointError, ConfigError  # noqa: E402
from peanchor.interventions import random_permutation  # noqa: E402

SIZE, PATCH = 32, 8
GRID = SIZE // PATCH
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=SIZE,
            patch_size=PATCH)  # fmt: skip
ATOL = 1e-6  # float32; at the identity and α = 1 the computation is transformers' own, so in practice 0


def build(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    configs = {
        "ViT": lambda: T.ViTConfig(num_labels=5, **TINY),
        "DeiT": lambda: T.DeiTConfig(num_labels=5, **TINY),
        "Dinov2": lambda: T.Dinov2Config(num_labels=5, **TINY),
        "Dinov2WithRegisters": lambda: T.Dinov2WithRegistersConfig(num_register_tokens=3, num_labels=5, **TINY),
        "CLIP": lambda: T.CLIPVisionConfig(**TINY),
        "Siglip": lambda: T.SiglipVisionConfig(**TINY),
        "DINOv3ViT": lambda: T.DINOv3ViTConfig(num_register_tokens=2, **TINY),
        "Beit": lambda: T.BeitConfig(num_labels=5, use_relative_position_bias=True, layer_scale_init_value=1.0,
                                    **TINY),  # a relative position bias per layer
    }
    prefix = next(p for p in sorted(configs, key=len, reverse=True) if name.startswith(p))
    config = configs[prefix]()
    if prefix in ("CLIP", "Siglip") and name.endswith("ForImageClassification"):  # a vision tower inside
        text = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64, vocab_size=64,
                    bos_token_id=0, eos_token_id=1, pad_token_id=1)  # fmt: skip
        config = getattr(T, f"{prefix}Config")(vision_config=config.to_dict(), text_config=text, num_labels=5)
    model = getattr(T, name)(config).eval()
    # Some families start their table at 0, and small random q/k barely feel a rotation: give both a signal.
    for key, param in model.named_parameters():
        if key.endswith(("position_embeddings", "position_embedding.weight", "q_proj.weight", "k_proj.weight",
                         "relative_position_bias_table")):
            torch.nn.init.normal_(param, std=0.5)
    return model


CLASSES = list(SUPPORTED_CLASSES)
PREFIX = {"vit": 1, "deit": 2, "dinov2": 1, "dinov2_with_registers": 4, "clip": 1, "siglip": 0, "dinov3": 3,
          "beit": 1}


def images(n: int = 3, size: int = SIZE) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(1))


def own(model: torch.nn.Module, x: torch.Tensor, wrapped: HFViT, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' own output (logits, or the pooled features) and probe tokens, from its hidden states."""
    with torch.no_grad():
        out = model(pixel_values=x, output_hidden_states=True, **kwargs)
        head = out.logits if wrapped.has_head else out.pooler_output
        layers = wrapped._layers
        p = PREFIX[wrapped.family.name]
        tokens = [getattr(layers[i], wrapped.family.norm)(out.hidden_states[i])[:, p:] for i in range(len(layers))]
    return head, torch.stack(tokens, dim=1)  # (B, L, N, D)


def move_patches(x: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """The image whose patch at slot i is the input's patch at position perm[i] (row-major slots)."""
    b, c, h, w = x.shape
    patches = x.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH).reshape(b, c, -1, PATCH, PATCH)  # (B, C, N, p, p)
    moved = patches[:, :, perm].reshape(b, c, h // PATCH, w // PATCH, PATCH, PATCH)
    return moved.permute(0, 1, 2, 4, 3, 5).reshape(b, c, h, w)


@pytest.mark.parametrize("name", CLASSES)
def test_identity_and_alpha_one_are_transformers_own(name: str) -> None:
    model = build(name)
    wrapped = HFViT(model)
    x = images()
    head, tokens = own(model, x, wrapped)
    with torch.no_grad():
        logits, probe = wrapped.forward_with_tokens(x, token_perm=torch.arange(GRID * GRID))
    assert wrapped.num_prefix == PREFIX[wrapped.family.name] and wrapped.grid == (GRID, GRID) and wrapped.depth == 2
    torch.testing.assert_close(logits, head, rtol=0, atol=ATOL)
    torch.testing.assert_close(probe, tokens, rtol=0, atol=ATOL)


def test_the_backend_runs_the_one_template_pass() -> None:
    """HFViT fills in the template's steps; the pass loop is the template's, not a copy."""
    from peanchor.models.template import TemplatePass

    assert issubclass(HFViT, TemplatePass) and "forward_intermediates" not in vars(HFViT)
    assert all(step in vars(HFViT) for step in ("_embed", "_blocks", "_probe", "_head"))


@pytest.mark.parametrize("name", CLASSES)
def test_rpi_is_the_models_own_forward_on_moved_patches(name: str) -> None:
    """The permutation acts right after patch embedding, before the position signal: the same as moving the
    image's patches, since a stride-p convolution embeds each patch on its own."""
    model = build(name)
    wrapped = HFViT(model)
    x = images()
    perm = random_permutation(GRID * GRID, generator=torch.Generator().manual_seed(3))
    head, tokens = own(model, move_patches(x, perm), wrapped)
    with torch.no_grad():
        logits, probe = wrapped.forward_with_tokens(x, token_perm=perm)
    torch.testing.assert_close(probe, tokens, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(logits, head, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", CLASSES)
def test_without_a_position_signal_the_model_is_permutation_equivariant(name: str) -> None:
    wrapped = HFViT(build(name))
    x = images()
    perm = random_permutation(GRID * GRID, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        plain_logits, plain = wrapped.forward_with_tokens(x, pe_scale=0.0)
        moved_logits, moved = wrapped.forward_with_tokens(x, token_perm=perm, pe_scale=0.0)
        _, with_pe = wrapped.forward_with_tokens(x, token_perm=perm)
    torch.testing.assert_close(moved, plain[:, :, perm], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(moved_logits, plain_logits, rtol=1e-4, atol=1e-5)
    assert (with_pe - plain[:, :, perm]).abs().max() > 1e-2  # α = 1 does carry position


@pytest.mark.parametrize("alpha", [0.0, 0.3])
@pytest.mark.parametrize("name", [n for n, (f, _) in SUPPORTED_CLASSES.items() if f not in ("dinov3", "beit")])
def test_alpha_scales_the_learned_table(name: str, alpha: float) -> None:
    """α = 0 is the model with its table removed (zeroed), and any α the model with its table scaled."""
    model = build(name)
    wrapped = HFViT(model)
    owner_path, key = wrapped.family.table  # type: ignore[misc]
    scaled = copy.deepcopy(model)
    backbone = scaled if not SUPPORTED_CLASSES[name][1] else getattr(scaled, SUPPORTED_CLASSES[name][1])
    owner = backbone
    for part in owner_path.split("."):
        owner = getattr(owner, part)
    table = getattr(owner, key)
    x = images()
    with torch.no_grad():
        table.mul_(alpha)
        head, tokens = own(scaled, x, HFViT(scaled))
        logits, probe = wrapped.forward_with_tokens(x, pe_scale=alpha)
    torch.testing.assert_close(probe, tokens, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, head, rtol=1e-5, atol=1e-6)
    original = getattr(wrapped.model.get_submodule(".".join(p for p in (SUPPORTED_CLASSES[name][1], owner_path) if p)), key)
    assert isinstance(original, torch.nn.Parameter)  # the model's own table is back after the pass


def test_alpha_zero_on_dinov3_turns_the_rotation_off() -> None:
    model = build("DINOv3ViTModel")
    wrapped = HFViT(model)
    still = copy.deepcopy(model)

    def no_rotation(pixel_values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n, d = GRID * GRID, still.config.hidden_size // still.config.num_attention_heads
        return torch.ones(n, d), torch.zeros(n, d)  # cos 1, sin 0: every angle is 0

    still.rope_embeddings.forward = no_rotation
    x = images()
    head, tokens = own(still, x, HFViT(still))
    with torch.no_grad():
        logits, probe = wrapped.forward_with_tokens(x, pe_scale=0.0)
        half, _ = wrapped.forward_with_tokens(x, pe_scale=0.5)
    torch.testing.assert_close(probe, tokens, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits, head, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(half, logits, atol=1e-4) and "inv_freq" in dict(model.rope_embeddings.named_buffers())


def test_a_truncated_pass_stops_early_and_matches_the_full_one() -> None:
    wrapped = HFViT(build("ViTForImageClassification"))
    x = images()
    perm = random_permutation(GRID * GRID, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        first = wrapped.spatial_tokens(x, token_perm=perm, pe_scale=0.5, num_layers=1)
        full = wrapped.spatial_tokens(x, token_perm=perm, pe_scale=0.5)
    assert first.shape == (3, 1, GRID * GRID, 32)
    torch.testing.assert_close(first, full[:, :1], rtol=0, atol=0)


@pytest.mark.parametrize("name", ["ViTForImageClassification", "SiglipVisionModel", "CLIPForImageClassification",
                                  "DINOv3ViTModel"])
def test_attention_weights_are_the_eager_paths(name: str) -> None:
    model = build(name)
    wrapped = HFViT(model)
    x = images(2)
    with torch.no_grad():
        maps = wrapped.attention_maps(x)  # (B, L, H, T, T)
        eager = copy.deepcopy(model)
        eager.set_attn_implementation("eager")
        reference = torch.stack(eager(pixel_values=x, output_attentions=True).attentions, dim=1)
    t = wrapped.num_prefix + GRID * GRID
    assert maps.shape == (2, 2, 4, t, t)
    torch.testing.assert_close(maps, reference, rtol=0, atol=ATOL)
    assert model.config._attn_implementation == "sdpa"  # put back after the pass


def test_another_resolution_uses_transformers_interpolation() -> None:
    model = build("ViTForImageClassification")
    wrapped = HFViT(model, img_size=48)
    x = images(size=48)
    with torch.no_grad():
        reference = model(pixel_values=x, interpolate_pos_encoding=True).logits
        logits = wrapped(x)
    assert wrapped.grid == (6, 6)
    torch.testing.assert_close(logits, reference, rtol=0, atol=ATOL)
    with pytest.raises(ValueError, match="images are 32x32 px but this wrapper analyses 48x48"):
        wrapped(images())
    with pytest.raises(ConfigError, match="not a multiple of the model's patch size 8"):
        HFViT(model, img_size=30)


def test_an_unsupported_class_is_one_line_naming_the_supported_ones() -> None:
    model = T.ViTForMaskedImageModeling(T.ViTConfig(**TINY))
    with pytest.raises(ConfigError) as e:
        HFViT(model)
    assert "ViTForMaskedImageModeling is not supported" in str(e.value) and "DINOv3ViTModel" in str(e.value)
    assert "\n" not in str(e.value)


def test_a_save_pretrained_folder_loads_offline(tmp_path) -> None:
    model = build("Dinov2WithRegistersForImageClassification")
    model.save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "preprocessor_config.json").write_text(json.dumps({"image_mean": [0.1, 0.2, 0.3],
                                                                        "image_std": [0.4, 0.5, 0.6]}))  # fmt: skip
    wrapped = load_hf_model(tmp_path / "m")
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(wrapped(x), model(pixel_values=x).logits, rtol=0, atol=ATOL)
    assert wrapped.mean == (0.1, 0.2, 0.3) and wrapped.std == (0.4, 0.5, 0.6) and not wrapped.training
    assert wrapped.model_args["class"] == "Dinov2WithRegistersForImageClassification"


def test_folders_that_cannot_be_analysed_are_one_line(tmp_path) -> None:
    build("ViTModel").save_pretrained(tmp_path / "vit")
    (tmp_path / "vit" / "model.safetensors").unlink()
    with pytest.raises(CheckpointError, match="has no weights"):
        load_hf_model(tmp_path / "vit")
    with pytest.raises(CheckpointError, match="has no config.json"):
        load_hf_model(tmp_path)
    T.ViTForMaskedImageModeling(T.ViTConfig(**TINY)).save_pretrained(tmp_path / "mim")
    with pytest.raises(ConfigError, match="ViTForMaskedImageModeling is not supported; supported: ViTModel"):
        load_hf_model(tmp_path / "mim")


def test_the_cli_analyses_a_save_pretrained_folder(tmp_path, capsys) -> None:
    from peanchor.cli import main

    build("Dinov2ForImageClassification").save_pretrained(tmp_path / "dino")  # 5 outputs: scenes has 10 classes
    out = tmp_path / "out"
    args = ["analyze", "--hf", str(tmp_path / "dino"), "--data", "scenes", "--images", "12", "--alphas", "1,0",
            "--shift", "jpeg:quality=10", "--no-progress", "--out", str(out)]  # fmt: skip
    assert main(args) != 0
    err = capsys.readouterr().err
    assert "the model has 5 outputs but the dataset has 10 classes" in err and "config.num_labels" in err
    assert not out.exists()
    model = T.Dinov2ForImageClassification(T.Dinov2Config(num_labels=10, **TINY)).eval()
    model.save_pretrained(tmp_path / "dino")
    assert main(args) == 0
    doc = json.loads((out / "analysis.json").read_text())
    assert doc["model"]["pe"] == "hf:ape" and doc["source"]["kind"] == "transformers"
    assert doc["source"]["model_args"]["class"] == "Dinov2ForImageClassification"
    assert [p["alpha"] for p in doc["alpha_sweep"]] == [1.0, 0.0] and doc["num_images"] == 12


def test_the_cli_refuses_a_folder_without_weights_in_one_line(tmp_path, capsys) -> None:
    from peanchor.cli import main

    build("ViTModel").save_pretrained(tmp_path / "vit")
    (tmp_path / "vit" / "model.safetensors").unlink()
    before = sorted(p.name for p in (tmp_path / "vit").iterdir())
    capsys.readouterr()  # save_pretrained's own progress bar
    code = main(["analyze", "--hf", str(tmp_path / "vit"), "--data", "scenes", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code != 0 and len(err.splitlines()) == 1 and "has no weights" in err
    assert sorted(p.name for p in (tmp_path / "vit").iterdir()) == before and not (tmp_path / "out").exists()
    assert main(["analyze", "--hf", str(tmp_path / "vit"), "--timm", "vit_small_patch16_224"]) != 0
    assert "give one of RUN_DIR, --timm NAME or --hf DIR, not --timm and --hf" in capsys.readouterr().err


def test_without_transformers_installed_the_error_says_how_to_install_it(tmp_path, monkeypatch) -> None:
    import sys

    from peanchor.core.errors import PeanchorError

    monkeypatch.setitem(sys.modules, "transformers", None)  # makes `import transformers` fail as if not installed
    with pytest.raises(PeanchorError, match=r"transformers is not installed: pip install 'peanchor\[transformers\]'"):
        load_hf_model(tmp_path)


def test_an_imagenet_head_keeps_the_logits_of_an_imagenet_subset() -> None:
    pytest.importorskip("timm")
    from peanchor.api.analysis import match_classes

    torch.manual_seed(0)
    wrapped = HFViT(T.ViTForImageClassification(T.ViTConfig(num_labels=1000, **TINY)).eval())
    x = images(2)
    with torch.no_grad():
        full = wrapped(x)
        match_classes(wrapped, ["n01443537", "n01440764"])  # ImageNet-1k indices 1 and 0
        torch.testing.assert_close(wrapped(x), full[:, [1, 0]], rtol=0, atol=0)
