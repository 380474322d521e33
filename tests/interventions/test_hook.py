"""``Hook(point, fn)``: any function at any hook point, on every backend. An identity function gives the plain pass
bit for bit; a function is applied where the library's own module computes that value (oracle: a plain torch forward
hook on that module during the library's own forward); a point the model lacks is one line naming its points."""

from __future__ import annotations

import pytest
import torch

from peanchor.api.analysis import wrap_model
from peanchor.core.errors import ConfigError
from peanchor.interventions import Hook, Intervention

timm = pytest.importorskip("timm")
transformers = pytest.importorskip("transformers")

TINY_HF = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
               patch_size=4)  # fmt: skip


def _peanchor(pe: str):
    from peanchor.models import create_model

    torch.manual_seed(0)
    return create_model("vit_micro", pe=pe, num_classes=5).eval()


def _timm(name: str, **kw):
    torch.manual_seed(0)
    return timm.create_model(name, img_size=16, patch_size=4, depth=2, embed_dim=32, num_heads=4, num_classes=5,
                             **kw).eval()  # fmt: skip


def _hf(config: str):
    torch.manual_seed(0)
    cls = {"ViTConfig": "ViTForImageClassification", "DINOv3ViTConfig": "DINOv3ViTModel"}[config]
    return getattr(transformers, cls)(getattr(transformers, config)(**TINY_HF)).eval()


BACKENDS = {
    "peanchor-ape": lambda: _peanchor("ape"),
    "peanchor-rope": lambda: _peanchor("rope"),
    "peanchor-alibi": lambda: _peanchor("alibi"),
    "peanchor-liere": lambda: _peanchor("liere"),
    "timm-ape": lambda: _timm("vit_tiny_patch16_224"),
    "timm-eva-rope": lambda: _timm("vit_small_patch16_rope_224"),
    "hf-vit": lambda: _hf("ViTConfig"),
    "hf-dinov3": lambda: _hf("DINOv3ViTConfig"),
}


def images() -> torch.Tensor:
    return torch.randn(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def run(model, iv: Intervention):
    with torch.no_grad():
        return model.forward_intermediates(images(), iv)


def points_of(model) -> list[str]:
    hooks = model.hook_points
    out = [p for p in ("pe.table", "rope.tables", "pe.bias", "pe.rotation") if p in hooks.points]
    sites = [p.split(".", 2)[2] for p in hooks.points if p.startswith("blocks.")]
    return out + [f"blocks.{k}.{site}" for k in range(hooks.depth) for site in sorted(sites)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_identity_function_at_any_point_is_the_plain_pass_bit_for_bit(backend: str) -> None:
    model = wrap_model(BACKENDS[backend]())
    plain = run(model, Intervention())
    points = points_of(model)
    assert any(p.endswith(".residual") for p in points)
    for point in points:
        out = run(model, Intervention().with_edits(Hook(point, lambda v: v)))
        assert torch.equal(out.tokens, plain.tokens), point
        assert (out.logits is None and plain.logits is None) or torch.equal(out.logits, plain.logits), point


def _mlp_module(model, layer: int) -> torch.nn.Module:
    """The library's own module whose output is block ``layer``'s MLP branch."""
    inner = getattr(model, "model", model)
    blocks = getattr(inner, "blocks", None)
    if blocks is None:  # transformers: ViTForImageClassification.vit.layer / DINOv3ViTModel.layer
        base = getattr(inner, "vit", inner)
        blocks = base.layer if hasattr(base, "layer") else base.encoder.layer
    return blocks[layer].mlp


@pytest.mark.parametrize("backend", ["peanchor-ape", "timm-ape", "timm-eva-rope", "hf-dinov3"])
def test_a_function_at_a_block_site_acts_where_the_librarys_module_computes_it(backend: str) -> None:
    """Doubling block 0's MLP branch through ``Hook`` equals a torch forward hook on the library's MLP module."""
    raw = BACKENDS[backend]()
    model = wrap_model(raw)
    edited = run(model, Intervention().with_edits(Hook("blocks.0.mlp", lambda x: 2 * x)))
    handle = _mlp_module(raw, 0).register_forward_hook(lambda _m, _i, out: 2 * out)
    try:
        reference = run(model, Intervention())
    finally:
        handle.remove()
    torch.testing.assert_close(edited.tokens, reference.tokens, rtol=0, atol=1e-6)
    if reference.logits is not None:
        torch.testing.assert_close(edited.logits, reference.logits, rtol=0, atol=1e-6)
    assert not torch.allclose(edited.tokens[:, 1:], run(model, Intervention()).tokens[:, 1:])


@pytest.mark.parametrize("backend", ["peanchor-ape", "timm-ape"])
def test_a_zero_table_through_a_hook_is_pe_zero(backend: str) -> None:
    model = wrap_model(BACKENDS[backend]())

    def zero(table):
        prefix = None if table.prefix is None else torch.zeros_like(table.prefix)
        return type(table)(prefix, torch.zeros_like(table.patches), table.grid)

    hooked = run(model, Intervention().with_edits(Hook("pe.table", zero)))
    assert torch.equal(hooked.logits, run(model, Intervention.parse("pe_zero")).logits)


def test_a_point_the_model_lacks_or_a_bad_function_is_one_line() -> None:
    model = wrap_model(BACKENDS["peanchor-ape"]())
    with pytest.raises(ConfigError, match=r"^hook acts at rope.tables, which peanchor:ape does not have; it has: "):
        run(model, Intervention().with_edits(Hook("rope.tables", lambda t: t)))
    with pytest.raises(ConfigError, match=r"has 2 blocks \(0-1\)"):
        run(model, Intervention().with_edits(Hook("blocks.7.mlp", lambda x: x)))
    with pytest.raises(ConfigError, match=r"returned shape \(2,\); expected"):
        run(model, Intervention().with_edits(Hook("blocks.0.mlp", lambda x: x[:, 0, 0])))
    with pytest.raises(ConfigError, match="not a hook point"):
        Hook("block.0.mlp", abs)


def test_the_edit_protocol_names_no_kind_outside_the_kinds() -> None:
    """What an edit needs before its pass (a fit, a donor pass) is asked through ``Edit``'s methods: neither
    ``Intervention`` nor the sweeps import a kind."""
    from pathlib import Path

    import peanchor.interventions as package

    root = Path(package.__file__).parent
    for name in ("intervention.py", "doses.py", "start.py", "hook.py"):
        text = (root / name).read_text()
        assert "interventions.kinds" not in text and "HeadAblate" not in text and "Patch)" not in text, name


def test_a_hooks_spec_names_its_function_and_reads_back_to_the_same_pass() -> None:
    """The spec (and so the record) says where the function is imported from; read back, it runs that function, and
    the hook equals the one that wrote it. A lambda's spec reads back too, but runs only from Python."""
    from peanchor.interventions import FunctionName, edit_from_spec

    model = wrap_model(BACKENDS["peanchor-ape"]())
    hook = Hook("blocks.1.mlp", torch.tanh)
    assert hook.spec == "hook:point=blocks.1.mlp,fn=torch:tanh"
    back = edit_from_spec(hook.spec)
    assert isinstance(back.fn, FunctionName) and back == hook and hash(back) == hash(hook) and back.spec == hook.spec
    assert torch.equal(run(model, Intervention().with_edits(back)).logits,
                       run(model, Intervention().with_edits(hook)).logits)  # fmt: skip
    lam = Hook("blocks.1.mlp", lambda x: x)
    assert lam.spec == f"hook:point=blocks.1.mlp,fn={__name__}:test_a_hooks_spec_names_its_function_and_reads_back_to_" \
                       "the_same_pass.<locals>.<lambda>"
    read = edit_from_spec(lam.spec)
    assert read != lam and lam == lam and read.spec == lam.spec  # one lambda's name is every lambda's there
    with pytest.raises(ConfigError, match=r"cannot be imported by its name \(a lambda, or a function defined inside "):
        run(model, Intervention().with_edits(read))
    for bad, message in [("hook:point=blocks.1.mlp", "needs its function: fn=MODULE:NAME"),
                         ("hook:point=blocks.1.mlp,fn=tanh", "expected the function as MODULE:NAME"),
                         ("hook:point=blocks.9.mlp,fn=torch:tanh", r"has 2 blocks \(0-1\)"),
                         ("hook:point=blocks.1.mlp,fn=no_such_module_here:f", "could not be imported: "
                                                                               "ModuleNotFoundError")]:  # fmt: skip
        with pytest.raises(ConfigError, match=message):
            run(model, Intervention.parse(bad))
