"""The timm adapter: timm's own logits, norm1 probes, RPI/α invariants, and safe weight loading.

Tiny random models of both families (VisionTransformer, Eva) built by ``timm.create_model`` with
size overrides; nothing is downloaded.
"""

from __future__ import annotations

import copy
import json
import pickle
import sys

import pytest
import torch

timm = pytest.importorskip("timm")

from safetensors.torch import save_file  # noqa: E402

from peanchor.adapters import TimmViT, load_timm_model, read_state_dict  # noqa: E402
from peanchor.adapters.timm_rope import rope_kinds  # noqa: E402
from peanchor.core.errors import CheckpointError, ConfigError, PeanchorError  # noqa: E402
from peanchor.interventions import permute_tokens, random_permutation  # noqa: E402
from peanchor.metrics import SSDCAccumulator  # noqa: E402

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)  # a 4x4 grid

# (test id, timm name, extra create_model kwargs, expected pe_name)
MODELS = [
    ("ape_cls", "vit_small_patch16_224", {}, "timm:ape"),
    ("none", "vit_small_patch16_224", {"pos_embed": "none"}, "timm:none"),
    ("ape_no_embed_class", "deit3_small_patch16_224", {}, "timm:ape"),
    ("ape_cls_dist", "deit_small_distilled_patch16_224", {}, "timm:ape"),  # DeiT distilled: CLS + distillation
    ("ape_reg4_gap", "vit_base_patch16_reg4_gap_256", {}, "timm:ape"),
    ("ape_cls_reg4", "vit_small_patch14_reg4_dinov2", {}, "timm:ape"),
    ("ape_dynamic", "vit_small_patch16_224", {"dynamic_img_size": True}, "timm:ape"),
    ("ape_parallel_block", "vit_pwee_patch16_reg1_gap_256", {}, "timm:ape"),
    ("rope", "vit_small_patch16_rope_224", {}, "timm:rope"),
    ("rope_ape", "vit_small_patch16_rope_ape_224", {}, "timm:rope_ape"),
    ("rope_mixed", "vit_small_patch16_rope_mixed_224", {}, "timm:rope_mixed"),
    ("rope_mixed_ape", "vit_small_patch16_rope_mixed_ape_224", {}, "timm:rope_mixed_ape"),
    ("rope_reg1_gap", "vit_base_patch16_rope_reg1_gap_256", {}, "timm:rope"),
    ("eva02", "eva02_tiny_patch14_224", {}, "timm:rope_ape"),
    ("rope_dinov3", "vit_small_patch16_dinov3", {}, "timm:rope_dinov3"),
]
IDS = [m[0] for m in MODELS]
POSITIONAL = [m for m in MODELS if m[3] != "timm:none"]


def build(name: str, extra: dict, *, lively: bool = False, seed: int = 0) -> TimmViT:
    """A tiny random model. ``lively`` sets layer scale to 1 (1e-5 in the rope models), undoes Eva's
    1e-3 head scale and sharpens attention, so that positional effects are large enough to test.
    (timm drops None kwargs, so ``init_values=None`` would not override.)"""
    if not timm.is_model(name):
        pytest.skip(f"{name} is not in timm {timm.__version__}")
    kw = dict(SMALL, **extra)
    if lively:
        kw["init_values"] = 1.0
    torch.manual_seed(seed)
    model = load_timm_model(name, **kw)
    if lively:
        with torch.no_grad():
            torch.nn.init.normal_(model.model.head.weight, std=0.1)
            for key, p in model.model.named_parameters():
                if key.endswith(("qkv.weight", "q_proj.weight", "k_proj.weight")):
                    p.mul_(8)  # peaked attention: how tokens mix depends clearly on their positions
    return model


def images(n: int = 3, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


def probe_norm(block: torch.nn.Module) -> torch.nn.Module:
    return block.norm1 if hasattr(block, "norm1") else block.in_norm  # ParallelScalingBlock: in_norm


def hooked_features(model: TimmViT, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """An independent reference: plain forward hooks on every block's first norm during ``timm_model(x)``."""
    feats: list[torch.Tensor] = []
    handles = [
        probe_norm(b).register_forward_hook(lambda m, i, o: feats.append(o[:, model.num_prefix :]))
        for b in model.model.blocks
    ]
    try:
        logits = model.model(x)
    finally:
        for h in handles:
            h.remove()
    return logits, torch.stack(feats, dim=1)  # (B, L, N, D)


def rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize(("name", "extra", "pe_name"), [m[1:] for m in MODELS], ids=IDS)
def test_matches_timm_forward_and_norm1_hooks(name, extra, pe_name):
    model = build(name, extra)
    x = images()
    with torch.no_grad():
        ref_logits, ref_tokens = hooked_features(model, x)
        logits, tokens = model.forward_with_tokens(x)
        ident = torch.arange(model.num_patches)
        torch.testing.assert_close(model(x), ref_logits, rtol=0, atol=1e-6)
        torch.testing.assert_close(model(x, token_perm=ident), ref_logits, rtol=0, atol=1e-6)
        torch.testing.assert_close(logits, ref_logits, rtol=0, atol=1e-6)
        torch.testing.assert_close(tokens, ref_tokens, rtol=0, atol=1e-6)
        torch.testing.assert_close(model.spatial_tokens(x), ref_tokens, rtol=0, atol=1e-6)
        # Stopping early gives the first probes of the full pass.
        torch.testing.assert_close(model.spatial_tokens(x, num_layers=1), ref_tokens[:, :1], rtol=0, atol=1e-6)
    assert model.pe_name == pe_name and model.pe_scalable == (pe_name != "timm:none")
    assert tokens.shape == (3, model.depth, model.num_patches, 64)
    assert (model.grid, model.num_patches, model.depth) == ((4, 4), 16, 2)
    assert json.loads(json.dumps(model.model_args))["name"] == name


@pytest.mark.parametrize("name", ["vit_small_patch16_224", "vit_small_patch16_rope_mixed_224"])
def test_ssdc_of_adapter_tokens_equals_ssdc_of_hooked_features(name):
    model = build(name, {}, lively=True)
    x = images(6)
    with torch.no_grad():
        _, ref = hooked_features(model, x)
        ours = model.spatial_tokens(x)
    acc_ours, acc_ref = SSDCAccumulator(model.grid), SSDCAccumulator(model.grid)
    acc_ours.update(ours[:3])
    acc_ours.update(ours[3:])
    acc_ref.update(ref)
    torch.testing.assert_close(acc_ours.compute(), acc_ref.compute(), rtol=0, atol=1e-6)


def check_position_free(model: TimmViT, pe_scale: float) -> None:
    """Logits invariant and tokens equivariant under a shared and a per-sample permutation."""
    x = images()
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        logits, tokens = model.forward_with_tokens(x, pe_scale=pe_scale)  # (B, C), (B, L, N, D)
        for perm in (random_permutation(model.num_patches, generator=g), random_permutation(16, batch=3, generator=g)):
            p_logits, p_tokens = model.forward_with_tokens(x, token_perm=perm, pe_scale=pe_scale)
            torch.testing.assert_close(p_logits, logits, rtol=0, atol=1e-5)
            expected = torch.stack(
                [permute_tokens(tokens[:, layer], perm) for layer in range(model.depth)], dim=1
            )  # slot i holds what position perm[i] held
            torch.testing.assert_close(p_tokens, expected, rtol=0, atol=1e-5)


def test_no_pe_model_is_permutation_invariant_and_equivariant():
    check_position_free(build("vit_small_patch16_224", {"pos_embed": "none"}, lively=True), pe_scale=1.0)


@pytest.mark.parametrize(("name", "extra", "pe_name"), [m[1:] for m in POSITIONAL], ids=[m[0] for m in POSITIONAL])
def test_alpha_zero_is_position_free_and_alpha_one_is_not(name, extra, pe_name):
    model = build(name, extra, lively=True)
    check_position_free(model, pe_scale=0.0)
    x = images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        tokens = model.spatial_tokens(x)
        p_tokens = model.spatial_tokens(x, token_perm=perm)
    expected = permute_tokens(tokens[:, -1], perm)
    # With the PE on, what a slot holds after the last probe depends on where the content sits.
    assert rel_diff(p_tokens[:, -1], expected) > 1e-2  # ~1e-8 where the model is position-free


def test_alpha_scales_the_whole_pos_embed_table():
    """α against an independent reference: timm's own forward with ``pos_embed`` (CLS row included) × α."""
    model = build("vit_small_patch16_224", {}, lively=True)
    reference = copy.deepcopy(model.model)
    with torch.no_grad():
        reference.pos_embed.mul_(0.3)
        x = images()
        torch.testing.assert_close(model(x, pe_scale=0.3), reference(x), rtol=0, atol=1e-6)


def test_alpha_scales_mixed_rope_frequencies():
    """Mixed RoPE angles are linear in the learned frequencies: α ≡ timm's forward with freqs × α."""
    model = build("vit_small_patch16_rope_mixed_ape_224", {}, lively=True)
    reference = copy.deepcopy(model.model)
    with torch.no_grad():
        reference.rope.freqs.mul_(0.4)
        reference.pos_embed.mul_(0.4)
        x = images()
        torch.testing.assert_close(model(x, pe_scale=0.4), reference(x), rtol=0, atol=1e-5)


@pytest.mark.parametrize(
    "name", ["vit_small_patch16_rope_224", "vit_base_patch16_rope_reg1_gap_256", "eva02_tiny_patch14_224",
             "vit_small_patch16_rope_mixed_224", "vit_small_patch16_dinov3"]
)  # fmt: skip
def test_rope_tables_rebuilt_with_scaled_angles(name):
    """The α path rebuilds timm's table: equal to timm's at α = 1, identity at 0, double angles at 2."""
    model = build(name, {})
    rope = model.model.rope
    native = model._rope(1.0)
    rebuild = rope_kinds()[type(rope)][1]
    dynamic = bool(model.model.dynamic_img_size)
    torch.testing.assert_close(rebuild(rope, list(model.grid), 1.0, dynamic), native, rtol=0, atol=1e-6)
    sin1, cos1 = native.chunk(2, dim=-1)
    sin0, cos0 = model._rope(0.0).chunk(2, dim=-1)
    torch.testing.assert_close(sin0, torch.zeros_like(sin0))
    torch.testing.assert_close(cos0, torch.ones_like(cos0))
    sin2, cos2 = model._rope(2.0).chunk(2, dim=-1)
    torch.testing.assert_close(sin2, 2 * sin1 * cos1, rtol=0, atol=1e-5)
    torch.testing.assert_close(cos2, 2 * cos1 * cos1 - 1, rtol=0, atol=1e-5)


# ---- weights ----------------------------------------------------------------------------------


def state_dict_copy(model: TimmViT) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone().contiguous() for k, v in model.model.state_dict().items()}


@pytest.mark.parametrize("name", ["vit_small_patch16_224", "vit_small_patch16_rope_mixed_224"])
@pytest.mark.parametrize("layout", ["safetensors", "bare", "model", "state_dict", "model_ema"])
def test_weights_round_trip(tmp_path, name, layout):
    source = build(name, {}, seed=1)
    sd = state_dict_copy(source)
    if layout == "safetensors":
        path = tmp_path / "w.safetensors"
        save_file(sd, str(path))
    else:
        path = tmp_path / "w.pth"
        torch.save(sd if layout == "bare" else {layout: sd, "epoch": 3}, path)
    kw = {k: v for k, v in SMALL.items() if k != "num_classes"}  # read from head.weight
    torch.manual_seed(123)  # a different random init, overwritten by the file
    loaded = load_timm_model(name, weights=path, **kw)
    assert not loaded.training and loaded.model_args["num_classes"] == 10
    assert loaded.model_args["weights"] == str(path)
    x = images()
    with torch.no_grad():
        torch.testing.assert_close(loaded(x), source(x), rtol=0, atol=0)


def test_mismatched_weights_name_the_offending_keys(tmp_path):
    deeper = build("vit_small_patch16_224", {"depth": 3})
    path = tmp_path / "deeper.safetensors"
    save_file(state_dict_copy(deeper), str(path))
    with pytest.raises(CheckpointError, match=r"unexpected blocks\.2\.") as err:
        load_timm_model("vit_small_patch16_224", weights=path, **SMALL)
    assert "\n" not in str(err.value)
    wider = build("vit_small_patch16_224", {"embed_dim": 96})
    torch.save(state_dict_copy(wider), tmp_path / "wider.pt")
    with pytest.raises(CheckpointError, match="shape mismatch"):
        load_timm_model("vit_small_patch16_224", weights=tmp_path / "wider.pt", **SMALL)


def test_missing_unknown_and_foreign_files(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_timm_model("vit_small_patch16_224", weights=tmp_path / "absent.safetensors", **SMALL)
    (tmp_path / "w.npz").write_bytes(b"x")
    with pytest.raises(CheckpointError, match="unknown weights format"):
        read_state_dict(tmp_path / "w.npz")
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 7)
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        read_state_dict(tmp_path / "bad.safetensors")
    torch.save({"epoch": 3, "optimizer": {"lr": 0.1}}, tmp_path / "no_model.pt")
    with pytest.raises(CheckpointError, match="holds no state dict"):
        read_state_dict(tmp_path / "no_model.pt")


class _Exploit:
    """Unpickling this creates a file: the stand-in for arbitrary code execution."""

    def __init__(self, target: str):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_malicious_pickle_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.pth"
    torch.save({"model": {"head.weight": torch.zeros(2, 2)}, "payload": _Exploit(str(marker))}, path)
    with pytest.raises(CheckpointError, match="refusing to unpickle"):
        load_timm_model("vit_small_patch16_224", weights=path, **SMALL)
    assert not marker.exists()
    with open(path, "rb") as f:  # the payload is live: a plain unpickler would have run it
        torch.load(f, weights_only=False)
    assert marker.exists()


# ---- errors ---------------------------------------------------------------------------------


def test_a_distilled_deit_has_two_prefix_tokens_and_timms_averaged_head():
    model = build("deit_small_distilled_patch16_224", {}, lively=True)
    assert model.num_prefix == 2 and model.model.pos_embed.shape[1] == 2 + model.num_patches
    x = images()
    with torch.no_grad():
        m = model.model
        feats = m.forward_features(x)  # (B, 2 + N, D), after the final norm
        averaged = (m.head(feats[:, 0]) + m.head_dist(feats[:, 1])) / 2  # DeiT's inference head, by hand
        torch.testing.assert_close(model(x), averaged, rtol=0, atol=1e-6)
        perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
        moved = model.spatial_tokens(x, token_perm=perm, pe_scale=0.0)  # no position signal: equivariant
        torch.testing.assert_close(moved, model.spatial_tokens(x, pe_scale=0.0)[:, :, perm], rtol=0, atol=1e-5)
        assert not torch.allclose(model.spatial_tokens(x, token_perm=perm), model.spatial_tokens(x)[:, :, perm],
                                  atol=1e-4)  # fmt: skip


def test_unsupported_and_unknown_models():
    with pytest.raises(ConfigError, match="VisionTransformerRelPos is not supported; supported: timm.models"):
        load_timm_model("vit_relpos_small_patch16_224", **SMALL)
    with pytest.raises(ConfigError, match="ResPostBlock"):
        load_timm_model("vit_base_patch16_rpn_224", **SMALL)
    with pytest.raises(ConfigError, match="unknown timm model 'vit_smal_patch16_224'; did you mean"):
        load_timm_model("vit_smal_patch16_224")
    with pytest.raises(ConfigError, match="rejected its arguments"):
        load_timm_model("vit_small_patch16_224", no_such_option=1, **SMALL)


def test_missing_timm_is_a_one_line_user_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "timm", None)  # makes `import timm` fail as if not installed
    with pytest.raises(PeanchorError, match=r"timm is not installed: pip install 'peanchor\[timm\]'"):
        load_timm_model("vit_small_patch16_224")


def test_patch_dropout_in_training_mode_is_refused():
    model = build("vit_small_patch16_224", {"patch_drop_rate": 0.5}).train()
    with pytest.raises(ValueError, match="call .eval"):
        model(images())
    model.eval()
    with torch.no_grad():
        torch.testing.assert_close(model(images()), model.model(images()), rtol=0, atol=1e-6)


def test_pickle_module_is_not_needed_for_safetensors(tmp_path, monkeypatch):
    """safetensors files never go through an unpickler."""
    source = build("vit_small_patch16_224", {})
    save_file(state_dict_copy(source), str(tmp_path / "w.safetensors"))

    def no_unpickling(*args, **kwargs):
        raise AssertionError("unpickler used")

    monkeypatch.setattr(pickle, "Unpickler", no_unpickling)
    monkeypatch.setattr(torch, "load", no_unpickling)
    assert set(read_state_dict(tmp_path / "w.safetensors")) == set(source.model.state_dict())


# ---- attention weights (the attention-distance lens) ---------------------------------------------------------


def eager_twin(model: TimmViT, name: str, extra: dict) -> torch.nn.Module:
    """The same timm model and weights, built with timm's global switch to eager attention."""
    from timm.layers import set_fused_attn, use_fused_attn

    before = use_fused_attn()
    set_fused_attn(False)
    try:
        twin = timm.create_model(name, pretrained=False, **dict(SMALL, **extra, init_values=1.0))
    finally:
        set_fused_attn(before)
    twin.load_state_dict(model.model.state_dict())
    return twin.eval()


@pytest.mark.parametrize(("name", "extra", "pe_name"), [m[1:] for m in MODELS], ids=IDS)
def test_attention_weights_are_timms_own(name, extra, pe_name):
    """The weights our pass hands out equal timm's own extraction (``timm.utils.AttentionExtract`` hooks on a twin
    built with eager attention), block by block, and asking for them changes neither the logits nor the model."""
    from timm.utils import AttentionExtract

    model = build(name, extra, lively=True)
    x = images()
    with torch.no_grad():
        reference = AttentionExtract(eager_twin(model, name, extra), method="hook")(x)  # name → (B, H, T, T)
        maps = model.attention_maps(x)  # (B, L, H, T, T)
        logits, _ = model.forward_with_tokens(x, attention=lambda i, w: None)
        plain = model(x)
    assert model.has_attention_weights
    assert maps.shape == (3, model.depth, 4, model.num_prefix + model.num_patches, model.num_prefix + model.num_patches)
    assert len(reference) == model.depth
    for layer, weights in enumerate(reference.values()):
        torch.testing.assert_close(maps[:, layer], weights, rtol=0, atol=1e-6)
    torch.testing.assert_close(logits, plain, rtol=0, atol=1e-5)  # eager and fused attention agree
    owners = [b if not hasattr(b, "attn") else b.attn for b in model.model.blocks]
    assert all(o.fused_attn for o in owners)  # the fused kernel is back


def test_no_pe_timm_model_attention_under_rpi_is_the_permuted_attention():
    model = build("vit_small_patch16_224", {"pos_embed": "none"}, lively=True)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(5))
    index = torch.cat([torch.arange(model.num_prefix), perm + model.num_prefix])
    with torch.no_grad():
        normal, shuffled = model.attention_maps(images()), model.attention_maps(images(), token_perm=perm)
    torch.testing.assert_close(shuffled, normal[..., index, :][..., index], rtol=0, atol=1e-5)


def test_an_unknown_attention_module_leaves_the_model_without_weights():
    model = build("vit_small_patch16_224", {})

    class Custom(torch.nn.Module):  # same interface, not a module whose eager path we know
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, x, **kwargs):
            return self.inner(x, **kwargs)

    model.model.blocks[1].attn = Custom(model.model.blocks[1].attn)
    wrapped = TimmViT(model.model)
    assert not wrapped.has_attention_weights
    with pytest.raises(ValueError, match="cannot hand out its attention weights"):
        wrapped.attention_maps(images())
