"""``forward_doses`` (peanchor/interventions/doses.py) and the started passes behind it (``Start``): on every
backend, the outputs equal separate ``forward_intermediates`` calls bit for bit, for doses of every kind, with and
without RPI, every ``layers`` and ``head``; and a layer sweep runs about half the blocks of k + 1 full passes, its
donor pass once. Tiny random models on the CPU (the timm and transformers builders of their intervention tests);
nothing is downloaded."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

from peanchor.interventions import HeadAblate, Intervention, Start, random_permutation
from peanchor.interventions.doses import forward_doses
from peanchor.pe import PE_NAMES

from tests.helpers.paths import import_file

TESTS = Path(__file__).resolve().parents[1]


def sibling(name: str) -> ModuleType:
    """Another test module (its builders), by its path under tests/, imported by path (pytest's importlib mode)."""
    return import_file(TESTS / f"{name}.py", "peanchor_tests_" + name.replace("/", "_"), reuse=True)


def dose_specs(model: torch.nn.Module) -> list[str]:
    """Doses of every kind the model takes: some start at a later block, some from the input."""
    points = model.hook_points.points
    last = model.depth - 1
    specs = [f"patch:site=residual,layer={k}" for k in range(model.depth)]
    specs += ["patch:site=residual,layer=1,donor=rpi,seed=3"]
    if "blocks.{k}.attn.heads" in points:
        specs += [f"head_ablate:layers={k},heads=0" for k in range(model.depth)] + ["head_ablate:layers=none"]
        specs += ["head_ablate", f"patch:site=attn,layer={last}", "patch:site=mlp,layer=1,donor=rpi",
                  "patch:site=mlp,layer=0+head_ablate:layers=1"]  # fmt: skip
    if "rope.tables" in points:
        specs += ["rope_planes:freqs=0", f"rope_planes:layers={last},freqs=0-1", "rope_planes:freqs=none"]
    if "pe.table" in points:
        specs += ["pe_zero", "pe_shuffle:seed=2"]
    if "input.grid" in points and {"pe.table", "rope.tables"} & points:
        specs += [f"pe_resample:grid={model.grid[0]}x{model.grid[1]},mode=bilinear"]
    return specs


def doses(model: torch.nn.Module, base: Intervention, x: torch.Tensor) -> list[Intervention]:
    """Every dose spec on top of ``base``, a fitted mean ablation, another α and the other token order."""
    out = [base.with_edits(*Intervention.parse(spec).edits) for spec in dose_specs(model)]
    if "blocks.{k}.attn.heads" in model.hook_points.points:
        mean = HeadAblate(layers=(1,), value="mean").fit_means(model, [x])
        out.append(base.with_edits(mean))
    out.append(Intervention(base.token_perm, 0.5, base.edits))
    other = None if base.token_perm is not None else random_permutation(model.num_patches, generator=seeded(5))
    out.append(Intervention(other, base.pe_scale, base.edits + Intervention.parse("patch:layer=1").edits))
    return out + [base]


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def same(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    return (a is None and b is None) or (a is not None and b is not None and torch.equal(a, b))


def block_runs(blocks: torch.nn.ModuleList, fn) -> tuple[list[int], object]:  # type: ignore[no-untyped-def]
    """The index of every block of ``blocks`` run during ``fn()``, in order, and what ``fn()`` returned."""
    runs: list[int] = []
    handles = [b.register_forward_hook(lambda *_a, i=i: runs.append(i)) for i, b in enumerate(blocks)]
    try:
        with torch.no_grad():
            result = fn()
    finally:
        for h in handles:
            h.remove()
    return runs, result


def check_equal_to_separate_calls(model: torch.nn.Module, x: torch.Tensor, blocks: torch.nn.ModuleList) -> None:
    """For a clean and an RPI base, every layers/head setting: forward_doses == separate calls, bit for bit, with
    fewer of the model's ``blocks`` run."""
    perm = random_permutation(model.num_patches, generator=seeded(0))
    for base in (Intervention(), Intervention(perm)):
        ivs = doses(model, base, x)
        for layers, head in ((None, True), (2, True), (0, True), (None, False), (2, False)):
            ran, (got, got_doses) = block_runs(blocks, lambda: forward_doses(model, x, base, ivs, layers=layers,
                                                                             head=head))  # fmt: skip
            separate, want = block_runs(blocks, lambda: [model.forward_intermediates(x, iv, layers=layers, head=head)
                                                         for iv in (base, *ivs)])  # fmt: skip
            assert len(ran) < len(separate) * 0.75, (len(ran), len(separate))
            for i, (g, w) in enumerate(zip([got, *got_doses], want)):
                what = f"{'rpi' if base.token_perm is not None else 'clean'} base, dose {i - 1} " \
                       f"({(base, *ivs)[i].spec or 'no edits'}), layers={layers}, head={head}"  # fmt: skip
                assert same(g.logits, w.logits), what
                assert same(g.tokens, w.tokens), what


# The development loop (-m "not slow") checks one PE of each mechanism and each backend family; CI runs them all.
# Left to CI: sincos, factorized and fourier (tables, like ape); rope_mixed and rope_dinov3 (rope tables, like rope);
# liere and string (rotations without tables, like comrope); alibi (an attention bias, like relbias); any new PE.
FAST_PES = {"none", "ape", "rope", "rope_ape", "comrope", "relbias", "peg"}


def fast_or_slow(names: list[str], fast: set[str]) -> list:  # type: ignore[type-arg]
    return [n if n in fast else pytest.param(n, marks=pytest.mark.slow) for n in names]


def test_the_development_loop_keeps_a_pe_of_each_mechanism() -> None:
    assert FAST_PES <= set(PE_NAMES) and FAST_TIMM <= set(TIMM)


@pytest.mark.parametrize("pe", fast_or_slow(list(PE_NAMES), FAST_PES))
def test_forward_doses_equals_separate_passes_on_our_vit(pe: str, micro) -> None:
    model = sibling("interventions/test_kinds").lively(micro(pe, depth=3))
    check_equal_to_separate_calls(model, torch.randn(2, 3, 16, 16, generator=seeded(1)), model.blocks)


TIMM = ["ape_cls", "ape_cls_reg4", "ape_parallel_block", "rope_mixed", "eva02", "rope_dinov3"]
FAST_TIMM = {"ape_cls_reg4", "ape_parallel_block", "rope_mixed", "eva02"}  # ape_cls: ape_cls_reg4 without registers;
# rope_dinov3: an Eva with rope tables, as eva02


@pytest.mark.parametrize("tid", fast_or_slow(TIMM, FAST_TIMM))
def test_forward_doses_equals_separate_passes_on_timm(tid: str) -> None:
    pytest.importorskip("timm")
    mod = sibling("adapters/test_timm_vit_interventions")
    _, name, extra = next(m for m in mod.MODELS if m[0] == tid)
    model = mod.build(name, extra, depth=3)
    check_equal_to_separate_calls(model, mod.images(), model.model.blocks)


@pytest.mark.parametrize("family", ["vit", "dinov2_reg", "clip", "dinov3"])
def test_forward_doses_equals_separate_passes_on_transformers(family: str) -> None:
    pytest.importorskip("transformers")
    mod = sibling("adapters/test_hf_vit_interventions")
    mod.TINY["num_hidden_layers"] = 3  # this module's own copy of the builders: three layers
    model = mod.build(family)
    assert model.depth == 3
    check_equal_to_separate_calls(model, mod.images(), model._layers)


# ---- what runs ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["head_ablate:layers={k}", "patch:site=residual,layer={k},donor=clean",
                                  "patch:site=mlp,layer={k},donor=rpi"])  # fmt: skip
def test_a_layer_sweep_runs_about_half_the_blocks_of_its_full_passes(kind: str, micro) -> None:
    model = micro("rope", depth=12)
    x = torch.randn(2, 3, 16, 16, generator=seeded(1))
    base = Intervention(random_permutation(model.num_patches, generator=seeded(0)))  # an RPI base
    ivs = [base.with_edits(*Intervention.parse(kind.format(k=k)).edits) for k in range(12)]
    runs, _ = block_runs(model.blocks, lambda: forward_doses(model, x, base, ivs))
    separate, _ = block_runs(model.blocks, lambda: [model.forward_intermediates(x, iv) for iv in (base, *ivs)])
    donor_passes = 1 if "donor=clean" in kind else 0  # donor=rpi on an RPI base is the base pass itself
    assert runs.count(0) == 1 + donor_passes + 1  # the base, the donor once, and the dose that starts at block 0
    assert len(runs) == 12 * (1 + donor_passes) + sum(12 - k for k in range(12))
    full = 13 * 12
    assert len(separate) == full + (12 * 12 if "patch" in kind else 0)  # a separate patch pass runs its donor too
    assert len(runs) / full <= 0.58 + donor_passes / 13


def test_a_started_pass_is_refused_when_it_differs_before_its_block(micro) -> None:
    model = micro("ape", depth=3)
    x = torch.randn(2, 3, 16, 16, generator=seeded(1))
    kept: dict = {}
    base = Intervention()
    out = model.forward_intermediates(x, base.with_edits(Start.record(2, kept)))
    start = Start(2, kept[("residual", 1)], out.tokens, base)
    resumed = model.forward_intermediates(x, Intervention.parse("head_ablate:layers=2"), start=start)
    assert torch.equal(resumed.logits, model.forward_intermediates(x, Intervention.parse("head_ablate:layers=2")).logits)
    perm = random_permutation(model.num_patches, generator=seeded(0))
    for bad in (Intervention.parse("head_ablate:layers=1"), Intervention.parse("pe_zero"), Intervention(perm),
                Intervention(pe_scale=0.5)):  # fmt: skip
        with pytest.raises(ValueError, match="started at block 2"):
            model.forward_intermediates(x, bad, start=start)
    with pytest.raises(ValueError, match="attention sink"):
        model.forward_intermediates(x, base, start=start, attention=lambda i, w: None)
    with pytest.raises(ValueError, match="needs the residual"):
        Start(1)


def test_first_layer_says_where_each_kind_begins(micro) -> None:
    hooks = micro("rope", depth=4).hook_points
    first = {spec: Intervention.parse(spec).edits[0].first_layer(hooks) for spec in
             ("pe_zero", "pe_resample", "rope_planes", "rope_planes:layers=2-3", "head_ablate", "head_ablate:layers=3,1",
              "head_ablate:layers=none", "patch:site=mlp,layer=2")}  # fmt: skip
    assert first == {"pe_zero": 0, "pe_resample": 0, "rope_planes": 0, "rope_planes:layers=2-3": 2, "head_ablate": 0,
                     "head_ablate:layers=3,1": 1, "head_ablate:layers=none": 4, "patch:site=mlp,layer=2": 2}
