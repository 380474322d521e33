"""The ViT and its PE interface: shapes, interventions and their invariants, over every registered PE."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.interventions import inverse_permutation, permute_tokens, random_permutation
from peanchor.models import MODEL_SIZES, create_model
from peanchor.models.vit import BlockPass
from peanchor.pe import PE_NAMES, PE_REGISTRY, PEContext, create_pe
from peanchor.pe.absolute import sincos_2d

SCALABLE = [n for n in PE_NAMES if PE_REGISTRY[n].scalable]


@pytest.fixture
def images() -> torch.Tensor:
    return torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("pe", PE_NAMES)
def test_shapes_finite_and_backward(pe, images, micro):
    model = micro(pe).train()
    logits = model(images)
    assert logits.shape == (3, 5) and torch.isfinite(logits).all()
    logits.sum().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    tokens = model.eval().spatial_tokens(images)
    assert tokens.shape == (3, model.depth, model.num_patches, 32)


@pytest.mark.parametrize("pe", PE_NAMES)
def test_identity_permutation_changes_nothing(pe, images, micro):
    model = micro(pe)
    ident = torch.arange(model.num_patches)
    assert torch.equal(model(images), model(images, token_perm=ident))
    assert torch.equal(model.spatial_tokens(images), model.spatial_tokens(images, token_perm=ident))


@pytest.mark.parametrize("pe", PE_NAMES)
def test_forward_with_tokens_matches_separate_calls(pe, images, micro):
    model = micro(pe)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(3))
    logits, tokens = model.forward_with_tokens(images, token_perm=perm, pe_scale=0.5)
    torch.testing.assert_close(logits, model(images, token_perm=perm, pe_scale=0.5), rtol=0, atol=0)
    torch.testing.assert_close(tokens, model.spatial_tokens(images, token_perm=perm, pe_scale=0.5), rtol=0, atol=0)


@pytest.mark.parametrize("pe", PE_NAMES)
def test_spatial_tokens_are_ln1_outputs(pe, images, micro):
    """An independent reference: forward hooks on every block's first LayerNorm."""
    model = micro(pe)
    seen: list[torch.Tensor] = []
    hooks = [b.norm1.register_forward_hook(lambda m, i, o: seen.append(o[:, 1:])) for b in model.blocks]
    model(images)
    for h in hooks:
        h.remove()
    torch.testing.assert_close(model.spatial_tokens(images), torch.stack(seen, dim=1))


@pytest.mark.parametrize("pe", PE_NAMES)
def test_truncated_probe_equals_the_first_layers(pe, images, micro):
    model = micro(pe)
    torch.testing.assert_close(model.spatial_tokens(images, num_layers=1), model.spatial_tokens(images)[:, :1])
    with pytest.raises(ValueError, match="num_layers"):
        model.spatial_tokens(images, num_layers=0)


def _unscaled_pe(pe: torch.nn.Module) -> dict:
    """The PE of ``pe`` applied as trained, written out here with no scaling code at all: what it adds to the tokens,
    its rotation tables, its attention bias, or its conditional term."""
    from peanchor.pe.base import RotaryTables

    p = pe.ctx.num_prefix
    out: dict = {}
    if pe.name == "ape":
        out["add"] = lambda x: x + pe.table  # the whole table, CLS row included
    elif pe.name == "sincos":
        cls = pe.cls_pe if pe.cls_mode == "learned" else 0.0
        out["add"] = lambda x: torch.cat((x[:, :p] + cls, x[:, p:] + pe.table), dim=1)
    elif pe.name == "rope":
        out["rope"] = RotaryTables(pe.angles.cos()[None, None], pe.angles.sin()[None, None], groups=2)
    elif pe.name == "rope_mixed":
        (fx, fy), (x, y) = pe.freqs, pe.xy  # (L, H, hd/2) each; (N,) each
        angle = x[None, None, :, None] * fx[:, :, None] + y[None, None, :, None] * fy[:, :, None]  # (L, H, N, hd/2)
        angle = torch.cat((angle, angle), dim=-1)  # (L, H, N, hd): pairs (j, j + hd/2)
        out["rope"] = RotaryTables(angle.cos(), angle.sin(), groups=1)
    elif pe.name == "relbias":
        rows, cols = pe.ctx.grid
        r, c = torch.arange(rows * cols) // cols, torch.arange(rows * cols) % cols
        offset = (r[:, None] - r[None, :] + rows - 1) * (2 * cols - 1) + (c[:, None] - c[None, :] + cols - 1)  # (N, N)
        patch = pe.table[:, offset].permute(0, 3, 1, 2)  # (L|1, H, N, N)
        bias = torch.zeros(*patch.shape[:2], p + rows * cols, p + rows * cols)
        bias[..., p:, p:] = patch
        if pe.cls_mode == "learned":
            c = pe.cls_bias  # (L|1, 3, H): CLS→patch, patch→CLS, CLS→CLS
            bias[..., :p, p:] = c[:, 0, :, None, None]
            bias[..., p:, :p] = c[:, 1, :, None, None]
            bias[..., :p, :p] = c[:, 2, :, None, None]
        out["bias"] = bias
    elif pe.name == "peg":
        rows, cols = pe.ctx.grid

        def after(i: int, x: torch.Tensor) -> torch.Tensor:
            if i != pe.block:
                return x
            grid = x[:, p:].transpose(1, 2).reshape(x.shape[0], -1, rows, cols)  # (B, D, H, W)
            return torch.cat((x[:, :p], x[:, p:] + pe.conv(grid).flatten(2).transpose(1, 2)), dim=1)

        out["after"] = after
    elif pe.name in ("fourier", "factorized"):
        code = pe.code_at(pe.xy)[None] if pe.name == "fourier" else (pe.row[:, :, None] + pe.col[:, None]).flatten(1, 2)
        out["add"] = lambda x: torch.cat((x[:, :p], x[:, p:] + code), dim=1)  # (B, P + N, D); the prefix gets nothing
    elif pe.name == "alibi":
        out["bias"] = pe.bias  # (1, H, T, T)
    elif pe.name in ("liere", "comrope", "string"):
        out["rotation"] = _unscaled_rotation(pe)
    elif pe.name == "rope_ape":
        out["add"] = lambda x: x + pe.table
        out.update(_unscaled_pe(pe.rope))
    elif pe.name == "rope_dinov3":
        angles = 2 * math.pi * pe.coords[:, :, None] / pe.periods  # (N, 2, hd/4)
        a = torch.cat((angles.flatten(1), angles.flatten(1)), dim=1)  # (N, hd)
        out["rope"] = RotaryTables(a.cos()[None, None], a.sin()[None, None], groups=1)
    else:
        raise AssertionError(f"write out the unscaled forward of the new scalable PE {pe.name!r} here")
    return out


def _unscaled_rotation(pe: torch.nn.Module):
    """The general rotation of LieRE, ComRoPE or STRING as trained, with no α anywhere."""
    from peanchor.pe.base import BlockRotation, RotaryTables
    from peanchor.pe.lie import cayley, skew

    rows, cols = pe.ctx.positions()
    if pe.name == "liere":
        gens = skew(pe.raw)  # (L, H, 2, nb, b, b)
        algebra = rows[:, None, None, None].float() * gens[:, :, None, 0] + cols[:, None, None, None].float() * gens[:, :, None, 1]
        return BlockRotation(torch.linalg.matrix_exp(algebra))  # (L, H, N, nb, b, b)
    if pe.name == "comrope":
        blocks = skew(pe.raw)[:, :, None]  # (L, H, 1, nb, b, b)
        return BlockRotation(torch.linalg.matrix_exp(blocks * pe.block_coords[:, :, None, None]))
    rope = _unscaled_pe(pe.rope)["rope"]  # RoPE-Mixed's tables (L, H, N, hd)
    p_basis = cayley(skew(pe.raw))  # (L, H, hd, hd)
    eye = torch.eye(pe.ctx.head_dim).expand(*rope.cos.shape[:3], -1, -1)  # (L, H, N, hd, hd)
    r = RotaryTables(rope.cos[:, :, :, None], rope.sin[:, :, :, None], 1)  # (L, H, N, 1, hd)
    r_mat = r.apply(eye, 0).mT  # (L, H, N, hd, hd): row j of what apply gives is R(p) e_j
    return BlockRotation((r_mat @ p_basis[:, :, None])[:, :, :, None])  # (L, H, N, 1, hd, hd)


def _unscaled_forward(model: torch.nn.Module, images: torch.Tensor, with_pe: bool = True) -> torch.Tensor:
    """The ViT's forward written out (patches, CLS, the PE as trained, the blocks, the head); logits (B, C)."""
    pe = _unscaled_pe(model.pe) if with_pe else {}
    x = model.patch_embed(images)  # (B, N, D)
    x = torch.cat((model.cls_token.expand(x.shape[0], -1, -1), x), dim=1)  # (B, 1 + N, D)
    x = pe.get("add", lambda t: t)(x)
    rope, bias, rotation = pe.get("rope"), pe.get("bias"), pe.get("rotation")
    for i, block in enumerate(model.blocks):
        x, _ = block(x, BlockPass(rope=rope.layer(i) if rope is not None else None,
                                  bias=bias[i if bias.shape[0] > 1 else 0] if bias is not None else None,
                                  rotation=rotation.layer(i) if rotation is not None else None,
                                  num_prefix=model.num_prefix))  # fmt: skip
        x = pe.get("after", lambda _i, t: t)(i, x)
    return model.head(model.norm(x)[:, 0])  # (B, C)


SCALABLE_VARIANTS = [(n, {}) for n in SCALABLE] + [("sincos", {"cls": "learned"}), ("relbias", {"cls": "learned"}),
                                                   ("relbias", {"shared": True})]  # fmt: skip


@pytest.mark.parametrize(("pe", "pe_kwargs"), SCALABLE_VARIANTS, ids=lambda v: str(v))
def test_alpha_one_is_the_pe_applied_without_any_scaling(pe, pe_kwargs, images, micro):
    """At α = 1 the model is the one whose PE is applied as is (the forward written out above, with no α anywhere),
    not merely the model at its default argument. Every parameter is enlarged so the PE's terms are not small, and
    the same forward without the PE differs clearly (the comparison can fail)."""
    model = micro(pe, pe_kwargs=pe_kwargs)
    with torch.no_grad():
        for param in model.parameters():  # peaked attention and a head that is not near zero
            param.mul_(4)
        for param in model.pe.parameters():
            param.add_(torch.randn(param.shape, generator=torch.Generator().manual_seed(2)))
        if pe == "alibi":
            model.pe.bias.mul_(20)  # a fixed bias, no parameter to enlarge: steeper slopes
        expected = _unscaled_forward(model, images)  # (B, C)
        scale = expected.abs().max()
        torch.testing.assert_close(model(images, pe_scale=1.0), expected, rtol=0, atol=1e-6 * scale)
        torch.testing.assert_close(model(images), expected, rtol=0, atol=1e-6 * scale)
        assert (_unscaled_forward(model, images, with_pe=False) - expected).abs().max() > 0.01 * scale


def _position_free_models() -> list[tuple[str, float]]:
    # `none` by construction, and every scalable PE once alpha = 0 removes it.
    return [("none", 1.0)] + [(n, 0.0) for n in SCALABLE]


@pytest.mark.parametrize(("pe", "alpha"), _position_free_models())
def test_without_positions_logits_are_permutation_invariant(pe, alpha, images, micro):
    model = micro(pe)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(model(images, token_perm=perm, pe_scale=alpha), model(images, pe_scale=alpha))
    per_sample = random_permutation(model.num_patches, batch=3, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(model(images, token_perm=per_sample, pe_scale=alpha), model(images, pe_scale=alpha))


@pytest.mark.parametrize(("pe", "alpha"), _position_free_models())
def test_without_positions_tokens_are_permutation_equivariant(pe, alpha, images, micro):
    model = micro(pe)
    base = model.spatial_tokens(images, pe_scale=alpha)  # (B, L, N, D)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(2))
    moved = model.spatial_tokens(images, token_perm=perm, pe_scale=alpha)
    torch.testing.assert_close(moved, base[:, :, perm])
    for i in range(model.num_patches):  # the contract, literally
        torch.testing.assert_close(moved[:, :, i], base[:, :, perm[i]])
    per_sample = random_permutation(model.num_patches, batch=3, generator=torch.Generator().manual_seed(4))
    moved = model.spatial_tokens(images, token_perm=per_sample, pe_scale=alpha)
    for b in range(3):
        torch.testing.assert_close(moved[b], base[b][:, per_sample[b]])


@pytest.mark.parametrize("pe", [n for n in PE_NAMES if n != "none"])
def test_real_pes_make_logits_depend_on_token_order(pe, images, micro):
    model = micro(pe)
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    moved, base = model(images, token_perm=perm), model(images)
    # Far above float noise (the invariant cases agree to ~1e-7 relative).
    rel = (moved - base).abs().max() / base.abs().max()
    assert rel > 1e-4, f"{pe}: logits ignore token order (relative change {rel:.2e})"


@pytest.mark.parametrize("pe", PE_NAMES)
def test_per_sample_permutation_equals_one_sample_at_a_time(pe, images, micro):
    model = micro(pe)
    perms = random_permutation(model.num_patches, batch=3, generator=torch.Generator().manual_seed(5))
    batched = model(images, token_perm=perms)
    for b in range(3):
        torch.testing.assert_close(batched[b : b + 1], model(images[b : b + 1], token_perm=perms[b]))


def test_permute_tokens_convention_and_inverse():
    x = torch.randn(2, 6, 4)
    perm = random_permutation(6, generator=torch.Generator().manual_seed(0))
    out = permute_tokens(x, perm)
    for i in range(6):
        assert torch.equal(out[:, i], x[:, perm[i]])  # slot i gets content from position perm[i]
    assert torch.equal(permute_tokens(out, inverse_permutation(perm)), x)
    with pytest.raises(ValueError, match="token_perm must have shape"):
        permute_tokens(x, torch.arange(5))


def test_sincos_matches_a_brute_force_loop():
    rows, cols, dim = 3, 4, 16
    table = sincos_2d((rows, cols), dim)
    q = dim // 4
    for t in range(rows * cols):
        y, x = divmod(t, cols)
        for k in range(q):
            w = 10000 ** (-k / q)
            expect = [math.sin(x * w), math.cos(x * w), math.sin(y * w), math.cos(y * w)]
            got = [table[t, k], table[t, q + k], table[t, 2 * q + k], table[t, 3 * q + k]]
            assert all(abs(float(a) - b) < 1e-6 for a, b in zip(got, expect))


def test_sincos_cls_modes(images, micro):
    zero = micro("sincos")
    learned = micro("sincos", pe_kwargs={"cls": "learned"})
    assert not hasattr(zero.pe, "cls_pe") and learned.pe.cls_pe.requires_grad
    x = torch.zeros(1, 1 + 16, 32)
    assert torch.equal(zero.pe.add(x, 1.0)[:, 0], x[:, 0])  # CLS gets nothing by default
    with pytest.raises(ValueError, match="cls must be"):
        micro("sincos", pe_kwargs={"cls": "mean"})


def test_axial_rope_matches_the_papers_quarter_equations():
    ctx = PEContext(embed_dim=48 * 2, num_heads=2, depth=1, grid=(3, 5))
    rope = create_pe("rope", ctx)
    hd, n = 48, 12
    q = torch.randn(1, 2, 1 + 15, hd)
    out = rope.rotary(1.0).layer(0).apply(q, num_prefix=1)
    assert torch.equal(out[:, :, 0], q[:, :, 0])  # CLS untouched
    f = torch.tensor([10000 ** (-j / n) for j in range(n)], dtype=torch.float64)
    for t in range(15):
        y, x = divmod(t, 5)
        q1, q2, q3, q4 = q[0, :, 1 + t].double().split(n, dim=-1)
        cx, sx, cy, sy = (x * f).cos(), (x * f).sin(), (y * f).cos(), (y * f).sin()
        expect = torch.cat((q1 * cx - q2 * sx, q2 * cx + q1 * sx, q3 * cy - q4 * sy, q4 * cy + q3 * sy), dim=-1)
        torch.testing.assert_close(out[0, :, 1 + t].double(), expect, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("pe", [n for n in PE_NAMES if PE_REGISTRY[n].rotary is not PE_REGISTRY["none"].rotary])
@pytest.mark.parametrize("alpha", [1.0, 0.37])
def test_rope_scores_depend_only_on_relative_offset(pe, alpha):
    torch.manual_seed(0)
    grid = (6, 6)
    ctx = PEContext(embed_dim=64, num_heads=2, depth=2, grid=grid)
    rope = create_pe(pe, ctx)
    q, k = torch.randn(2, 32), torch.randn(2, 32)  # one query and key vector per head
    n = grid[0] * grid[1]
    tokens_q = q[None, :, None].expand(1, 2, 1 + n, 32)
    tokens_k = k[None, :, None].expand(1, 2, 1 + n, 32)
    for layer in range(2):
        table = rope.rotary(alpha).layer(layer)
        rq, rk = table.apply(tokens_q, 1)[0, :, 1:], table.apply(tokens_k, 1)[0, :, 1:]  # (H, N, hd)
        scores = torch.einsum("hnd,hmd->hnm", rq, rk)  # (H, N, N)
        by_offset: dict[tuple[int, int], torch.Tensor] = {}
        for i in range(n):
            for j in range(n):
                off = (i // 6 - j // 6, i % 6 - j % 6)
                ref = by_offset.setdefault(off, scores[:, i, j])
                torch.testing.assert_close(scores[:, i, j], ref, rtol=1e-4, atol=1e-4)
        assert len(by_offset) == 11 * 11


def test_unknown_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="unknown positional encoding 'nerf'; valid: none, ape"):
        create_model("vit_micro", pe="nerf", num_classes=2)
    with pytest.raises(ValueError, match="unknown model 'vit_huge'"):
        create_model("vit_huge", num_classes=2)
    with pytest.raises(ValueError, match="unknown model override"):
        create_model("vit_micro", num_classes=2, width=3)


def test_overrides_and_model_args_rebuild_the_same_architecture():
    model = create_model(
        "vit_tiny", pe="ape", num_classes=7, embed_dim=64, depth=3, num_heads=4, mlp_ratio=2.0,
        drop_rate=0.1, drop_path_rate=0.05, pe_kwargs={"init_std": 0.02},
    )  # fmt: skip
    assert (model.depth, model.blocks[0].attn.num_heads, model.grid) == (3, 4, (8, 8))
    assert model.blocks[0].mlp.fc1.out_features == 128 and model.pe.init_std == 0.02
    rebuilt = create_model(**model.model_args)
    assert rebuilt.model_args == model.model_args
    assert [p.shape for p in rebuilt.parameters()] == [p.shape for p in model.parameters()]


def test_paper_model_is_the_papers_size():
    model = create_model("vit_paper", pe="ape", num_classes=100)
    n = sum(p.numel() for p in model.parameters())
    assert 21e6 < n < 23e6  # "about 22M"
    assert model.grid == (14, 14) and model.blocks[0].attn.num_heads == 8
    assert isinstance(model.norm, torch.nn.Identity)  # no final norm
    assert model.pe.table.shape == (1, 197, 384)
    assert MODEL_SIZES["vit_paper"]["drop_path_rate"] == 0.2


def test_ape_init_is_standard_normal():
    model = create_model("vit_paper", pe="ape", num_classes=100)
    assert abs(model.pe.table.std().item() - 1.0) < 0.02


@pytest.mark.parametrize("pe", PE_NAMES)
def test_flop_count_equals_torchs_flop_counter(pe, micro):
    """forward_flops (from the architecture) against torch's operator-level count of a real forward pass, with
    attention in its math form so that q·kᵀ and attention·v are visible as matmuls to the counter."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    from peanchor.models import forward_flops, train_flops

    model = micro(pe, num_classes=7)
    x = torch.randn(3, 3, 16, 16)
    with torch.no_grad(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(x)
    # A PE's products that run once per pass (a Fourier code's MLP) are counted once, not per image.
    assert counter.get_total_flops() == 3 * forward_flops(model) + 2 * (model.pe.macs(3) - 3 * model.pe.macs(1))
    assert train_flops(model) == 3 * forward_flops(model)


def test_the_paper_model_costs_the_known_4_6_gmac_per_image():
    from peanchor.models import forward_flops

    model = create_model("vit_paper", pe="none", num_classes=100)
    assert forward_flops(model) / 2 == pytest.approx(4.6e9, rel=0.01)  # ViT-S/16 at 224 px: ~4.6 GMAC
    assert model.head_drop.p == 0.0 and create_model("vit_micro", num_classes=2, drop_rate=0.3).head_drop.p == 0.3
