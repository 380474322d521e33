"""The edit kinds on peanchor's ViT: their spec text, and the exact oracles of docs/interventions.md, over the PE
registry where they apply (tiny random models, CPU)."""

from __future__ import annotations

import pytest
import torch

from peanchor.core.errors import ConfigError
from peanchor.interventions import (
    HeadAblate,
    Intervention,
    Patch,
    PEResample,
    names,
    random_permutation,
    register_intervention,
)
from peanchor.interventions.registry import INTERVENTIONS
from peanchor.pe import PE_NAMES

from tests.helpers.images import striped_scenes

TABLE_PES = [pe for pe in PE_NAMES if pe in ("ape", "sincos")]
ROPE_PES = [pe for pe in PE_NAMES if pe in ("rope", "rope_mixed")]  # the families: tests/pe/test_families*.py


def lively(model: torch.nn.Module) -> torch.nn.Module:
    """Peaked attention and a head of unit scale, so that positional effects are large enough to see (the init's
    0.02 leaves the logits near zero)."""
    with torch.no_grad():
        for block in model.blocks:
            block.attn.qkv.weight.mul_(20)
        torch.nn.init.normal_(model.head.weight)
    return model


def images(n: int = 3, size: int = 16, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


def logits(model: torch.nn.Module, x: torch.Tensor, spec: str = "", perm: torch.Tensor | None = None) -> torch.Tensor:
    iv = Intervention.parse(spec, token_perm=perm) if spec else Intervention(perm)
    with torch.no_grad():
        return model.forward_intermediates(x, iv).logits


def same_weights(model: torch.nn.Module, pe: str, micro, **kw) -> torch.nn.Module:
    """A ``pe`` model with ``model``'s weights (the PE's own, if any, left out)."""
    other = micro(pe, seed=123, **kw)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("pe.")}
    missing, unexpected = other.load_state_dict(state, strict=False)
    assert not unexpected and all(k.startswith("pe.") for k in missing)
    return other


# ---- the spec text ---------------------------------------------------------------------------------------------


def test_a_spec_reads_back_from_its_own_text() -> None:
    spec = ("pe_zero:prefix=keep+head_ablate:layers=0,2-3,heads=1,value=zero+rope_planes:axis=x,freqs=0-3"
            "+pe_resample:grid=6x8,mode=bilinear+patch:site=mlp,layer=1,donor=rpi,seed=4")  # fmt: skip
    iv = Intervention.parse(spec)
    assert [type(e).__name__ for e in iv.edits] == ["PEZero", "HeadAblate", "RopePlanes", "PEResample", "Patch"]
    assert iv.edits[1].layers == (0, 2, 3) and iv.edits[2].freqs == (0, 1, 2, 3) and iv.edits[3].grid == (6, 8)
    again = Intervention.parse(iv.spec)
    assert again.spec == iv.spec and [e == f for e, f in zip(again.edits, iv.edits)] == [True] * 5
    listed = Intervention.parse(["pe_zero", "patch:layer=1"])
    assert listed.spec == "pe_zero:prefix=zero+patch:site=residual,layer=1,donor=clean,seed=0"


@pytest.mark.parametrize(
    "spec, message",
    [
        ("pe_nothing", "unknown intervention 'pe_nothing'; valid: " + ", ".join(INTERVENTIONS)),
        ("rope_planes:freq=0-3", "intervention rope_planes has no parameter 'freq'; valid: layers, heads, axis, freqs"),
        ("rope_planes:axis=z", "rope_planes:axis=z: expected one of x, y, both"),
        ("head_ablate:layers=3-1", "head_ablate:layers=3-1: range 3-1 runs backwards"),
        ("pe_resample:grid=7by7", "pe_resample:grid=7by7: expected ROWSxCOLS of patches, e.g. 14x14"),
        ("patch:layer=1,layer=2", "'layer' is given twice"),
        ("pe_zero++patch", "expected KIND[:key=value,...], several joined with '+'"),
    ],
)
def test_bad_specs_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(ConfigError) as e:
        Intervention.parse(spec)
    assert message in str(e.value) and "\n" not in str(e.value)


def test_a_kind_registered_later_is_listed_at_once() -> None:
    from dataclasses import dataclass

    from peanchor.interventions import Edit

    @dataclass(frozen=True)
    class Nothing(Edit):
        kind = "nothing_at_all"
        summary = "changes nothing"

    register_intervention(Nothing)
    try:
        assert "nothing_at_all" in names() and isinstance(Intervention.parse("nothing_at_all").edits[0], Nothing)
        register_intervention(Nothing)  # the same class again: nothing changes (an entry point may name it too)

        @dataclass(frozen=True)
        class Other(Edit):
            kind = "nothing_at_all"
            summary = "another kind of the same name"

        with pytest.raises(ValueError, match="registered twice"):
            register_intervention(Other)
    finally:
        del INTERVENTIONS["nothing_at_all"]


# ---- identity edits are the plain pass, bit for bit -------------------------------------------------------------


def identity_specs(model: torch.nn.Module) -> list[str]:
    points = model.hook_points.points
    specs = ["head_ablate:heads=none", "head_ablate:layers=none", "patch:site=residual,layer=1,donor=clean",
             "patch:site=attn,layer=0", "patch:site=mlp,layer=1"]  # fmt: skip
    if "rope.tables" in points:
        specs += ["rope_planes:freqs=none", "rope_planes:layers=none", "rope_planes:heads=none"]
    if "input.grid" in points and ({"pe.table", "rope.tables", "pe.bias", "pe.rotation"} & points):
        specs += [f"pe_resample:grid={model.grid[0]}x{model.grid[1]}", "pe_resample:rope_positions=interpolate"]
    return specs


@pytest.mark.parametrize("pe", PE_NAMES)
def test_identity_edits_are_bit_identical_to_the_plain_pass(pe: str, micro) -> None:
    model, x = micro(pe), images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    plain, plain_rpi = logits(model, x), logits(model, x, perm=perm)
    for spec in identity_specs(model):
        assert torch.equal(logits(model, x, spec), plain), spec
    # A patch from the pass itself: the RPI pass's own activations into the RPI pass.
    assert torch.equal(logits(model, x, "patch:site=residual,layer=0,donor=rpi", perm), plain_rpi)
    tokens = model.forward_intermediates(x, Intervention.parse("head_ablate:heads=none")).tokens
    assert torch.equal(tokens, model.forward_intermediates(x).tokens)


# ---- PE removed == the same weights without a PE ----------------------------------------------------------------


@pytest.mark.parametrize("pe", ROPE_PES)
def test_rope_with_every_plane_removed_is_the_same_weights_without_a_pe(pe: str, micro) -> None:
    model, x = lively(micro(pe)), images()
    none = same_weights(model, "none", micro)
    assert not torch.allclose(logits(model, x), logits(none, x), atol=1e-3)  # the rotation matters here
    assert torch.equal(logits(model, x, "rope_planes"), logits(none, x))
    if pe == "rope":  # both axes removed one after the other is the same
        assert torch.equal(logits(model, x, "rope_planes:axis=x+rope_planes:axis=y"), logits(none, x))


@pytest.mark.parametrize("pe", TABLE_PES)
def test_a_zeroed_table_is_the_same_weights_without_a_pe(pe: str, micro) -> None:
    kw = {"pe_kwargs": {"cls": "learned"}} if pe == "sincos" else {}
    model, x = lively(micro(pe, **kw)), images()
    if pe == "sincos":
        torch.nn.init.normal_(model.pe.cls_pe)
    none = same_weights(model, "none", micro)
    assert torch.equal(logits(model, x, "pe_zero"), logits(none, x))
    kept = logits(model, x, "pe_zero:prefix=keep")  # the CLS row as trained: not the none model
    assert not torch.allclose(kept, logits(none, x), atol=1e-3)


def test_rope_planes_sets_exactly_the_chosen_channels(micro) -> None:
    model = micro("rope", depth=3)
    run = Intervention.parse("rope_planes:layers=1,heads=0,axis=y,freqs=1-2").bind(
        model.hook_points, lambda iv: None, model.num_patches, "cpu"
    )
    edited, plain = model._edited_rope(run, 1.0), model.pe.rotary(1.0)
    hd = 16  # vit_micro: 32 wide, 2 heads; axial planes: x on channels 0-7, y on 8-15, pairs (j, j + 4)
    chosen = torch.zeros(3, 2, 1, hd, dtype=torch.bool)
    chosen[1, 0, 0, [9, 13, 10, 14]] = True
    assert edited.cos.shape == (3, 2, model.num_patches, hd)
    assert torch.equal(edited.cos, torch.where(chosen, 1.0, plain.cos.expand_as(edited.cos)))
    assert torch.equal(edited.sin, torch.where(chosen, 0.0, plain.sin.expand_as(edited.sin)))
    freqs = [p.freq for p in model.hook_points.planes if p.axis == "x"]
    assert freqs == [0, 1, 2, 3]


# ---- patching -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pe", PE_NAMES)
def test_the_clean_residual_patched_into_an_rpi_pass_gives_the_clean_logits(pe: str, micro) -> None:
    model, x = lively(micro(pe, depth=3)), images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    clean, rpi = logits(model, x), logits(model, x, perm=perm)
    if pe != "none":
        assert not torch.allclose(clean, rpi, atol=1e-3)
    for layer in range(3):
        assert torch.equal(logits(model, x, f"patch:site=residual,layer={layer}", perm), clean)
    # and the reverse: the RPI residual into a clean pass gives the RPI logits (the seed draws the same perm)
    shared = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(5))
    assert torch.equal(logits(model, x, "patch:site=residual,layer=2,donor=rpi,seed=5"), logits(model, x, perm=shared))


def test_patching_a_branch_replaces_just_that_branch(micro) -> None:
    """The MLP branch of the last block from the clean pass into an RPI pass, against forward hooks that do the same
    by hand."""
    model, x = micro("ape", depth=2), images()
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    kept = {}
    handle = model.blocks[1].mlp.register_forward_hook(lambda m, i, out: kept.setdefault("mlp", out))
    logits(model, x)
    handle.remove()
    handle = model.blocks[1].mlp.register_forward_hook(lambda m, i, out: kept["mlp"])
    by_hand = logits(model, x, perm=perm)
    handle.remove()
    assert torch.equal(logits(model, x, "patch:site=mlp,layer=1", perm), by_hand)


# ---- head ablation ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pe", PE_NAMES)
def test_every_head_ablated_leaves_the_attention_branch_at_its_projection_bias(pe: str, micro) -> None:
    model, x = micro(pe, depth=2), images()
    attn = model.blocks[1].attn
    torch.nn.init.normal_(attn.proj.bias)
    handle = attn.register_forward_hook(lambda m, i, out: m.proj.bias.expand_as(out))
    reference = logits(model, x)
    handle.remove()
    assert torch.equal(logits(model, x, "head_ablate:layers=1"), reference)
    with torch.no_grad():
        attn.proj.bias.zero_()  # no bias: ablating every head is the attention output set to zero
    handle = attn.register_forward_hook(lambda m, i, out: torch.zeros_like(out))
    reference = logits(model, x)
    handle.remove()
    assert torch.equal(logits(model, x, "head_ablate:layers=1,heads=0-1"), reference)


def test_mean_ablation_fits_the_mean_over_the_images(micro) -> None:
    model, x = micro("ape", depth=2), images(4)
    edit = HeadAblate(layers=(0,), heads=(1,), value="mean")
    with pytest.raises(ConfigError, match="needs the heads' means"):
        logits(model, x, "head_ablate:layers=0,value=mean")
    own = [edit.fit_means(model, [x[i : i + 1]]) for i in range(4)]  # one image: its mean is itself
    for i, e in enumerate(own):
        assert torch.equal(model.forward_intermediates(x[i : i + 1], Intervention(edits=(e,))).logits,
                           model.forward_intermediates(x[i : i + 1]).logits)  # fmt: skip
    fitted = edit.fit_means(model, [x[:1], x[1:]])  # batches of 1 and 3 images
    expected = torch.stack([e.means[0] for e in own]).double().mean(0).float()  # (T, H, hd)
    torch.testing.assert_close(fitted.means[0], expected, rtol=0, atol=1e-6)
    seen = {}
    model.blocks[0].attn.proj.register_forward_pre_hook(lambda m, args: seen.setdefault("in", args[0]))
    model.forward_intermediates(x, Intervention(edits=(fitted,)))
    heads = seen["in"].view(4, -1, 2, 16)  # (B, T, H, hd): what the projection got
    assert torch.equal(heads[:, :, 1], fitted.means[0][:, 1].expand(4, -1, -1))


# ---- resampling ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["bicubic", "bilinear", "nearest"])
@pytest.mark.parametrize("antialias", [True, False])
@pytest.mark.parametrize("new", [(6, 6), (2, 3), (5, 2), (8, 2)])
def test_resampled_rows_agree_with_timm(mode: str, antialias: bool, new: tuple[int, int]) -> None:
    timm_pos = pytest.importorskip("timm.layers")
    from peanchor.interventions import resample_rows

    table = torch.randn(1, 1 + 4 * 4, 8, generator=torch.Generator().manual_seed(0))
    ours = resample_rows(table[:, 1:], (4, 4), new, mode, antialias)
    if mode == "nearest":  # torch antialiases bilinear and bicubic only; timm passes antialias=True regardless
        antialias = False
    theirs = timm_pos.resample_abs_pos_embed(table, list(new), [4, 4], 1, mode, antialias)
    assert torch.equal(theirs[:, :1], table[:, :1]) and torch.equal(ours, theirs[:, 1:])


def test_a_non_square_grid_of_equal_size_is_still_resampled() -> None:
    """timm PR #2737's bug: 2x8 and 4x4 have the same number of rows, but not the same grid."""
    from peanchor.interventions import resample_rows

    table = torch.randn(1, 16, 4)
    assert not torch.equal(resample_rows(table, (4, 4), (2, 8), "bicubic", True), table)


@pytest.mark.parametrize("pe", TABLE_PES)
def test_a_resampled_table_runs_the_model_at_another_resolution(pe: str, micro) -> None:
    timm_pos = pytest.importorskip("timm.layers")
    model, x = micro(pe), images(2, size=24)  # trained 4x4, run at 6x6
    big = micro(pe, img_size=24, seed=9)
    big.load_state_dict({k: v for k, v in model.state_dict().items() if k != "pe.table"}, strict=False)
    with torch.no_grad():
        if pe == "ape":
            big.pe.table.copy_(timm_pos.resample_abs_pos_embed(model.pe.table, [6, 6], [4, 4], 1))
        else:  # the sin-cos code resampled, not recomputed at the new grid
            big.pe.table = timm_pos.resample_abs_pos_embed(model.pe.table[None], [6, 6], [4, 4], 0)[0]
    assert torch.equal(logits(model, x, "pe_resample:grid=6x6"), logits(big, x))


@pytest.mark.parametrize("pe", ROPE_PES)
def test_rope_at_another_grid_takes_that_grids_positions(pe: str, micro) -> None:
    model, x = lively(micro(pe)), images(2, size=24)
    big = micro(pe, img_size=24, seed=9)
    big.load_state_dict(model.state_dict())  # rope_mixed: the same learned frequencies
    assert torch.equal(logits(model, x, "pe_resample:grid=6x6,rope_positions=extrapolate"), logits(big, x))
    interpolated = logits(model, x, "pe_resample:grid=6x6,rope_positions=interpolate")
    assert not torch.allclose(interpolated, logits(big, x), atol=1e-3)
    edit = PEResample(grid=(6, 6), rope_positions="interpolate")
    rows, cols = edit.rope_coordinates(model.hook_points)
    assert cols[:6].tolist() == pytest.approx([(j + 0.5) * 4 / 6 - 0.5 for j in range(6)])
    assert rows.min() == pytest.approx(-1 / 6) and rows.max() == pytest.approx(3 + 1 / 6)


# ---- bad input against a model ------------------------------------------------------------------------------------


def test_edits_a_model_cannot_take_are_one_line(micro) -> None:
    ape, rope = micro("ape"), micro("rope")
    x = images()
    cases = [
        (ape, x, "rope_planes", "rope_planes acts at rope.tables, which peanchor:ape does not have; it has: pe.table, "
                                "input.grid, blocks.{k}.attn.heads, blocks.{k}.attn, blocks.{k}.mlp, blocks.{k}.residual"),
        (micro("relbias"), x, "pe_zero", "pe_zero acts at pe.table, rope.tables, pe.bias, pe.rotation, and "
                                         "peanchor:relbias has none of them"),
        (ape, x, "head_ablate:heads=2", "head_ablate:heads=2: the model has 2 heads (0-1)"),
        (ape, x, "patch:layer=2", "patch:layer=2: the model has 2 blocks (0-1)"),
        (rope, x, "rope_planes:freqs=0-4", "rope_planes:freqs=0-4: the model has 4 frequencies per axis (0-3)"),
        (ape, x, "pe_resample:grid=6x6", "images of 16x16 px give a 4x4 patch grid; this pass expects 6x6 (24x24 px)"),
        (micro("relbias"), x, "pe_resample:grid=4x4", "pe_resample needs pe.table, rope.tables, pe.bias or pe.rotation"),
        (micro("rope_mixed"), x, "rope_planes:axis=x", "the planes of peanchor:rope_mixed mix both axes; use axis=both"),
        (micro("none"), x, "pe_shuffle", "pe_shuffle acts at pe.table, which peanchor:none does not have"),
    ]
    for model, images_, spec, message in cases:
        with pytest.raises(ConfigError) as e:
            logits(model, images_, spec)
        assert message in str(e.value) and "\n" not in str(e.value), spec


def test_a_shuffled_table_is_the_table_with_its_patch_rows_moved(micro) -> None:
    from peanchor.interventions.kinds.pe_shuffle import table_permutation

    model, x = micro("ape"), images()
    moved = micro("ape")
    perm = table_permutation(model.num_patches, 7)
    with torch.no_grad():
        moved.pe.table[:, 1:] = model.pe.table[:, 1:][:, perm]
    assert torch.equal(logits(model, x, "pe_shuffle:seed=7"), logits(moved, x))
    assert sorted(perm.tolist()) == list(range(model.num_patches)) and perm.tolist() != list(range(16))
    assert Patch(layer=1).spec == "patch:site=residual,layer=1,donor=clean,seed=0"


# ---- on trained models ----------------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("pe", TABLE_PES)
def test_under_pe_zero_ssdc_under_rpi_vanishes_on_a_trained_model(pe: str, micro, fit_briefly) -> None:
    """A trained absolute-PE model under pe_zero: SSDC under RPI (a permutation per image) is about 0 at every layer,
    and exactly that of the same weights run as a ``none`` model."""
    from peanchor.data import IMAGENET_MEAN, IMAGENET_STD, DataInfo, normalize
    from peanchor.interventions import PEZero
    from peanchor.metrics import SSDCAccumulator

    info = DataInfo(2, 32, IMAGENET_MEAN, IMAGENET_STD, ["a", "b"], "striped")
    model = fit_briefly(micro(pe, num_classes=2, img_size=32), *striped_scenes(512, seed=0), info)  # an 8x8 grid
    none = same_weights(model, "none", micro, num_classes=2, img_size=32)
    x = normalize(striped_scenes(256, seed=3)[0], info.mean, info.std)

    def ssdc_under_rpi(m: torch.nn.Module, edits: tuple) -> list[float]:
        acc, g = SSDCAccumulator(m.grid), torch.Generator().manual_seed(0)
        with torch.inference_mode():
            for s in range(0, len(x), 32):
                perm = random_permutation(m.num_patches, batch=32, generator=g)
                acc.update(m.forward_intermediates(x[s : s + 32], Intervention(perm, edits=edits), head=False).tokens)
        return acc.compute().tolist()

    zeroed, anchored = ssdc_under_rpi(model, (PEZero(),)), ssdc_under_rpi(model, ())
    assert zeroed == ssdc_under_rpi(none, ())
    assert max(abs(v) for v in zeroed) < 0.1, zeroed  # measured: ape -0.01, -0.03; sincos 0.06, 0.06
    if pe == "sincos":  # the fixed code anchors from the start: the same measure sees it without the edit (0.56)
        assert anchored[0] > 0.3, anchored
