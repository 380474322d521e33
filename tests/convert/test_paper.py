"""``peanchor import paper``: the paper's checkpoint layout → a run directory that computes the same logits.

The checkpoints here are built from random weights in the author's exact layout (docs/study.md, "The
paper's released checkpoints"), and the expected logits come from a straight-line float64 forward
pass written from the equations in docs/study.md; it uses nothing from peanchor's model code.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from safetensors.torch import save_file

from peanchor.checkpoint.files import load_model, read_metadata
from peanchor.cli import main
from peanchor.commands import import_ as import_command
from peanchor.convert import paper
from peanchor.convert.paper import CONDITIONS, convert_paper_state_dict, infer_arch, load_paper_state_dict, map_tensors
from peanchor.convert.paper_run import import_paper
from peanchor.core.errors import CheckpointError, RunDirError
from peanchor.interventions import random_permutation

SMALL = dict(dim=96, depth=2, heads=8, patch=16, grid=4, classes=10)  # 8 heads of 12, 64 px, a 4×4 grid
FULL = dict(dim=384, depth=12, heads=8, patch=16, grid=14, classes=100)  # the paper's vit


# ----------------------------------------------------------------------------------------------
# The author's layout, from the equations


def reference_sincos(grid: int, dim: int) -> torch.Tensor:
    """[sin(xω), cos(xω), sin(yω), cos(yω)], ω_k = 10000^(−k/(D/4)), x = column, y = row: ``(N, D)``."""
    q = dim // 4
    rows = []
    for t in range(grid * grid):
        y, x = divmod(t, grid)
        w = [10000 ** (-k / q) for k in range(q)]
        rows.append(
            [math.sin(x * v) for v in w] + [math.cos(x * v) for v in w]
            + [math.sin(y * v) for v in w] + [math.cos(y * v) for v in w]
        )  # fmt: skip
    return torch.tensor(rows, dtype=torch.float64)


def paper_state_dict(
    condition: str,
    *,
    dim: int,
    depth: int,
    heads: int,
    patch: int,
    grid: int,
    classes: int,
    seed: int = 0,
    cls_pos: bool = True,
    sincos_everywhere: bool = True,
    empty: bool = False,
) -> dict[str, torch.Tensor]:
    """Random weights with the author's key names and shapes.

    The author's model registers ``pos_embedding`` and the ``sincos_pe`` buffer in every condition
    (``sincos_everywhere``); ``cls_pos`` only exists in SPE models. ``empty`` allocates nothing
    (meta tensors: shapes only).
    """
    g = torch.Generator().manual_seed(seed)
    n, hidden = grid * grid, 4 * dim

    def r(*shape: int, std: float = 0.1, mean: float = 0.0) -> torch.Tensor:
        if empty:
            return torch.empty(*shape, device="meta")
        return mean + std * torch.randn(*shape, generator=g)

    sd = {
        "patcher.conv.weight": r(dim, 3, patch, patch, std=(3 * patch * patch) ** -0.5),
        "patcher.conv.bias": r(dim),
        "cls_token": r(1, 1, dim, std=1.0),
        "pos_embedding.weight": r(n + 1, dim, std=1.0),  # nn.Embedding, N(0, 1)
    }
    for i in range(depth):
        sd |= {
            f"encoder_layers.{i}.0.weight": r(dim, mean=1.0), f"encoder_layers.{i}.0.bias": r(dim),
            f"encoder_layers.{i}.1.qkv.weight": r(3 * dim, dim, std=dim**-0.5),
            f"encoder_layers.{i}.1.qkv.bias": r(3 * dim),
            f"encoder_layers.{i}.1.proj.weight": r(dim, dim, std=dim**-0.5),
            f"encoder_layers.{i}.1.proj.bias": r(dim),
            f"feed_forward.{i}.0.weight": r(dim, mean=1.0), f"feed_forward.{i}.0.bias": r(dim),
            f"feed_forward.{i}.1.0.weight": r(hidden, dim, std=dim**-0.5), f"feed_forward.{i}.1.0.bias": r(hidden),
            f"feed_forward.{i}.1.3.weight": r(dim, hidden, std=hidden**-0.5), f"feed_forward.{i}.1.3.bias": r(dim),
        }  # fmt: skip
    sd |= {"final_feed_forward.weight": r(classes, dim, std=dim**-0.5), "final_feed_forward.bias": r(classes)}
    if condition == "spe" or sincos_everywhere:
        sd["sincos_pe"] = torch.empty(n, dim, device="meta") if empty else reference_sincos(grid, dim).float()
    if condition == "spe" and cls_pos:
        sd["cls_pos"] = r(1, 1, dim, std=0.5)
    return sd


def reference_logits(
    sd: dict[str, torch.Tensor],
    condition: str,
    images: torch.Tensor,
    heads: int,
    alpha: float = 1.0,
    perm: torch.Tensor | None = None,
) -> torch.Tensor:
    """The author's forward pass, straight from docs/study.md, in float64. ``alpha`` scales APE/SPE."""
    w = {k: v.double() for k, v in sd.items()}
    d = w["cls_token"].shape[-1]
    p = w["patcher.conv.weight"].shape[-1]
    depth = 1 + max(int(k.split(".")[1]) for k in w if k.startswith("encoder_layers."))
    x = F.conv2d(images.double(), w["patcher.conv.weight"], w["patcher.conv.bias"], stride=p)  # (B, D, g, g)
    b, _, grid, _ = x.shape
    n = grid * grid
    x = x.flatten(2).transpose(1, 2)  # (B, N, D), row-major
    if perm is not None:
        x = x[:, perm]  # RPI: content moves, the PE below stays on the slots
    cls = w["cls_token"].expand(b, 1, d)
    if condition == "spe":
        x = x + alpha * w["sincos_pe"].reshape(n, d)
        if "cls_pos" in w:
            cls = cls + alpha * w["cls_pos"].reshape(1, 1, d)
    x = torch.cat((cls, x), dim=1)  # (B, 1 + N, D)
    if condition in ("ape", "rpt"):
        x = x + alpha * w["pos_embedding.weight"]
    hd = d // heads
    quarter = hd // 4
    f = torch.tensor([10000 ** (-j / quarter) for j in range(quarter)], dtype=torch.float64)
    rows = torch.arange(n) // grid
    cols = torch.arange(n) % grid
    ax, ay = cols[:, None].double() * f, rows[:, None].double() * f  # (N, hd/4)

    def rope(t: torch.Tensor) -> torch.Tensor:  # (B, H, T, hd): patch tokens rotated, CLS untouched
        c, pt = t[:, :, :1], t[:, :, 1:]
        q1, q2, q3, q4 = pt.split(quarter, dim=-1)
        pt = torch.cat((
            q1 * ax.cos() - q2 * ax.sin(), q2 * ax.cos() + q1 * ax.sin(),
            q3 * ay.cos() - q4 * ay.sin(), q4 * ay.cos() + q3 * ay.sin(),
        ), dim=-1)  # fmt: skip
        return torch.cat((c, pt), dim=2)

    def linear(t: torch.Tensor, name: str) -> torch.Tensor:
        return t @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    for i in range(depth):
        h = F.layer_norm(x, (d,), w[f"encoder_layers.{i}.0.weight"], w[f"encoder_layers.{i}.0.bias"], eps=1e-5)
        qkv = linear(h, f"encoder_layers.{i}.1.qkv")  # (B, T, 3D): q, k, v in that order
        q, k, v = (qkv[..., j * d : (j + 1) * d].reshape(b, 1 + n, heads, hd).transpose(1, 2) for j in range(3))
        if condition == "rope":
            q, k = rope(q), rope(k)
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(hd), dim=-1)  # (B, H, T, T)
        x = x + linear((att @ v).transpose(1, 2).reshape(b, 1 + n, d), f"encoder_layers.{i}.1.proj")
        h = F.layer_norm(x, (d,), w[f"feed_forward.{i}.0.weight"], w[f"feed_forward.{i}.0.bias"], eps=1e-5)
        x = x + linear(F.gelu(linear(h, f"feed_forward.{i}.1.0")), f"feed_forward.{i}.1.3")
    return linear(x[:, 0], "final_feed_forward")  # no final norm


def save_paper_checkpoint(path: Path, sd: dict[str, torch.Tensor], bare: bool = False) -> Path:
    torch.save(sd if bare else {"model": sd, "epoch": 60}, path)
    return path


@pytest.fixture(scope="module")
def images() -> torch.Tensor:
    return torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(1))


# ----------------------------------------------------------------------------------------------
# Equality with the reference, every condition


CASES = [
    ("ape", {}),
    ("rpt", {}),
    ("spe", {}),  # with a CLS position parameter
    ("spe", {"cls_pos": False}),
    ("rope", {}),
    ("ablated", {}),
    ("ape", {"sincos_everywhere": False}),  # docs/study.md's reading: sincos_pe only in SPE models
]


@pytest.mark.parametrize(("condition", "variant"), CASES)
def test_imported_run_computes_the_papers_logits(condition, variant, tmp_path, images):
    sd = paper_state_dict(condition, **SMALL, **variant)
    ckpt = save_paper_checkpoint(tmp_path / f"{condition}2_imagenet_100_60.pt", sd)
    out = tmp_path / "run"
    summary = import_paper(ckpt, out, condition)
    model = load_model(out)
    with torch.no_grad():
        got = model(images)
    torch.testing.assert_close(got.double(), reference_logits(sd, condition, images, heads=8), rtol=1e-5, atol=1e-5)

    pe = {"ape": "ape", "rpt": "ape", "spe": "sincos", "rope": "rope", "ablated": "none"}[condition]
    assert model.pe_name == pe and model.grid == (4, 4) and model.blocks[0].attn.num_heads == 8
    assert isinstance(model.norm, torch.nn.Identity)
    assert summary["condition"] == condition and summary["pe"] == pe and summary["rpt"] == (condition == "rpt")
    assert summary["val_acc"] is None and summary["replicate"] == 2
    on_disk = json.loads((out / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    assert on_disk["imported_from"] == str(ckpt.resolve())
    meta = read_metadata(out)
    assert meta["condition"] == condition and meta["imported_from"] == str(ckpt.resolve())
    assert meta["model_args"] == model.model_args
    if condition == "spe":
        assert model.pe.cls_mode == ("learned" if variant.get("cls_pos", True) else "zero")


@pytest.mark.parametrize("condition", ["ape", "spe"])
def test_alpha_scales_the_papers_pe_like_the_reference(condition, tmp_path, images):
    """α multiplies the whole absolute code: APE's table with its CLS row, SPE's table and CLS position."""
    sd = paper_state_dict(condition, **SMALL)
    out = tmp_path / "run"
    import_paper(save_paper_checkpoint(tmp_path / "m.pt", sd), out, condition)
    model = load_model(out)
    with torch.no_grad():
        got = model(images, pe_scale=0.4)
    torch.testing.assert_close(got.double(), reference_logits(sd, condition, images, 8, alpha=0.4), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("condition", ["ape", "rope"])
def test_rpi_moves_content_across_slots_like_the_reference(condition, tmp_path, images):
    sd = paper_state_dict(condition, **SMALL)
    out = tmp_path / "run"
    import_paper(save_paper_checkpoint(tmp_path / "m.pt", sd), out, condition)
    model = load_model(out)
    perm = random_permutation(16, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        got = model(images, token_perm=perm)
    ref = reference_logits(sd, condition, images, 8, perm=perm)
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)


def test_the_run_directory_is_a_normal_peanchor_run(tmp_path):
    from peanchor.training.config import load_config

    ckpt = save_paper_checkpoint(tmp_path / "rpt4_imagenet_100_60", paper_state_dict("rpt", **SMALL))
    out = tmp_path / "run"
    import_paper(ckpt, out)  # the condition comes from the name
    assert sorted(p.name for p in out.iterdir()) == ["config.yaml", "model.safetensors", "summary.json"]
    config = load_config(out / "config.yaml")
    assert (config.preset, config.data.name, config.data.img_size) == ("paper", "imagenet100", 64)
    assert (config.model.name, config.model.pe, config.model.patch_size, config.train.rpt) == ("vit_paper", "ape", 16, True)
    assert config.model.overrides == {"embed_dim": 96, "depth": 2}  # what differs from vit_paper
    assert config.condition == "rpt" and config.train.seed == 4 and config.train.epochs == 60
    # The config rebuilds the same architecture as the weights' model_args.
    from peanchor.models import create_model

    m = config.model
    rebuilt = create_model(m.name, pe=m.pe, num_classes=10, img_size=config.data.img_size, patch_size=m.patch_size,
                           pe_kwargs=m.pe_kwargs, **m.overrides)  # fmt: skip
    assert rebuilt.model_args == read_metadata(out)["model_args"]


# ----------------------------------------------------------------------------------------------
# The full-size layout (shapes only)


@pytest.mark.parametrize("condition", CONDITIONS)
def test_full_size_layout_maps_onto_vit_paper(condition, monkeypatch):
    from peanchor.models import create_model

    monkeypatch.setattr(torch.nn.init, "trunc_normal_", lambda t, **kw: t)  # only shapes matter: skip the slow init
    sd = paper_state_dict(condition, **FULL, empty=True)
    arch = infer_arch(sd, condition)
    assert (arch.embed_dim, arch.depth, arch.num_heads, arch.patch_size, arch.grid) == (384, 12, 8, 16, 14)
    assert (arch.img_size, arch.num_classes, arch.mlp_hidden, arch.num_patches) == (224, 100, 1536, 196)
    pe_kwargs = {"cls": "learned"} if condition == "spe" else {}
    model = create_model("vit_paper", pe=paper.CONDITION_PE[condition], num_classes=100, pe_kwargs=pe_kwargs)
    expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    mapped = {k: tuple(v.shape) for k, v in map_tensors(sd, arch, condition).items()}
    assert mapped == expected


# ----------------------------------------------------------------------------------------------
# Safety and errors


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_runs_code_is_refused_and_never_runs(tmp_path, capsys):
    marker = tmp_path / "marker"
    sd = paper_state_dict("ape", **SMALL)
    ckpt = tmp_path / "ape1_imagenet_100_60.pt"
    torch.save({"model": sd, "payload": _RunsCode(marker)}, ckpt)
    with pytest.raises(CheckpointError, match="unsafe unpickling"):
        load_paper_state_dict(ckpt)
    assert main(["import", "paper", str(ckpt), "--out", str(tmp_path / "run")]) == 2
    assert "unsafe unpickling" in capsys.readouterr().err
    assert not marker.exists()
    assert not (tmp_path / "run" / "model.safetensors").exists()


def test_a_truncated_or_foreign_file_is_a_checkpoint_error(tmp_path):
    ckpt = save_paper_checkpoint(tmp_path / "m.pt", paper_state_dict("ape", **SMALL))
    data = ckpt.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="not a readable torch.save file"):
        load_paper_state_dict(tmp_path / "cut.pt")
    (tmp_path / "text.pt").write_text("hello")
    with pytest.raises(CheckpointError, match=r"text\.pt is neither a torch.save file .* nor safetensors"):
        load_paper_state_dict(tmp_path / "text.pt")
    torch.save({"optimizer": {"lr": 1.0}}, tmp_path / "opt.pt")
    with pytest.raises(CheckpointError, match="holds no state dict"):
        load_paper_state_dict(tmp_path / "opt.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        load_paper_state_dict(tmp_path / "nope.pt")


def test_import_paper_names_a_foreign_file_and_what_it_expected(tmp_path, capsys):
    """Random bytes, an empty file and a safetensors file of other tensors: one line naming the file and saying
    what `import paper` reads, never "needs unsafe unpickling"; nothing is written."""
    (tmp_path / "random.pt").write_bytes(bytes(range(7, 256)) * 16)
    (tmp_path / "empty.pt").write_bytes(b"")
    save_file({"w": torch.zeros(3)}, str(tmp_path / "other.safetensors"))
    cases = {
        "random.pt": r"random\.pt is neither a torch.save file .*it starts with bytes 07 08 09 .*expected one of the "
        r"paper's released checkpoints",
        "empty.pt": r"empty\.pt is neither a torch.save file .*it is empty.*expected one of the paper's released",
        "other.safetensors": r"other\.safetensors: the checkpoint has no 'patcher\.conv\.weight': not the paper's "
        r"ViT layout \(expected patcher\.conv\.\*, cls_token",
    }
    for name, pattern in cases.items():
        out = tmp_path / f"run-{name}"
        assert main(["import", "paper", str(tmp_path / name), "--condition", "ape", "--out", str(out)]) != 0
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("peanchor: error: ") and "unpickling" not in err[0], err
        assert re.search(pattern, err[0]), err[0]
        assert not out.exists()


def test_import_paper_reads_the_same_tensors_saved_as_safetensors(tmp_path, images):
    sd = paper_state_dict("rope", **SMALL)
    save_file({k: v.contiguous() for k, v in sd.items()}, str(tmp_path / "rope1_imagenet_100_60.safetensors"))
    assert main(["import", "paper", str(tmp_path / "rope1_imagenet_100_60.safetensors"), "--out", str(tmp_path / "run")]) == 0
    with torch.no_grad():
        got = load_model(tmp_path / "run")(images)
    torch.testing.assert_close(got.double(), reference_logits(sd, "rope", images, 8), rtol=1e-5, atol=1e-5)


def test_a_bare_or_wrapped_state_dict_is_accepted(tmp_path, images):
    sd = paper_state_dict("rope", **SMALL)
    bare = save_paper_checkpoint(tmp_path / "bare.pt", sd, bare=True)
    assert set(load_paper_state_dict(bare)) == set(sd)
    ddp = save_paper_checkpoint(tmp_path / "ddp.pt", {f"module.{k}": v for k, v in sd.items()})
    import_paper(ddp, tmp_path / "run", "rope")
    with torch.no_grad():
        got = load_model(tmp_path / "run")(images)
    torch.testing.assert_close(got.double(), reference_logits(sd, "rope", images, 8), rtol=1e-5, atol=1e-5)


def test_wrong_condition_is_a_clear_error(tmp_path):
    no_sincos = paper_state_dict("ape", **SMALL, sincos_everywhere=False)
    with pytest.raises(CheckpointError, match="needs the sincos_pe buffer.*not an SPE model"):
        convert_paper_state_dict(no_sincos, "spe")
    spe = paper_state_dict("spe", **SMALL)
    with pytest.raises(CheckpointError, match="only SPE models have.*--condition spe"):
        convert_paper_state_dict(spe, "ape")
    ckpt = save_paper_checkpoint(tmp_path / "spe3_imagenet_100_60.pt", spe)
    with pytest.raises(CheckpointError, match="named as a 'spe' checkpoint but --condition is 'rope'"):
        import_paper(ckpt, tmp_path / "run", "rope")
    anonymous = save_paper_checkpoint(tmp_path / "model.pt", spe)
    with pytest.raises(CheckpointError, match="pass --condition"):
        import_paper(anonymous, tmp_path / "run")
    with pytest.raises(CheckpointError, match="unknown condition 'vit'"):
        import_paper(anonymous, tmp_path / "run", "vit")
    assert not (tmp_path / "run").exists()


def test_unknown_and_missing_keys_are_listed():
    sd = paper_state_dict("ape", **SMALL)
    sd["encoder_layers.0.1.q_norm.weight"] = torch.ones(12)
    del sd["feed_forward.1.1.3.bias"]
    with pytest.raises(CheckpointError, match=r"missing feed_forward\.1\.1\.3\.bias; unknown encoder_layers\.0\.1\.q_norm"):
        convert_paper_state_dict(sd, "ape")
    with pytest.raises(CheckpointError, match="no 'patcher.conv.weight'"):
        convert_paper_state_dict({"head.weight": torch.ones(2, 2)}, "ape")


def test_shapes_that_do_not_fit_are_errors():
    sd = paper_state_dict("rope", **SMALL)
    with pytest.raises(CheckpointError, match="not divisible by 7 heads"):
        convert_paper_state_dict(sd, "rope", num_heads=7)
    with pytest.raises(CheckpointError, match="head dim divisible by 4"):
        convert_paper_state_dict(sd, "rope", num_heads=16)  # head dim 6
    sd["encoder_layers.1.1.proj.weight"] = torch.zeros(96, 48)
    with pytest.raises(CheckpointError, match=r"blocks\.1\.attn\.proj\.weight \(96, 48\) in the file"):
        convert_paper_state_dict(sd, "rope")
    odd = paper_state_dict("ape", **SMALL)
    odd["pos_embedding.weight"] = torch.zeros(16, 96)  # 15 patches: not a square grid
    with pytest.raises(CheckpointError, match="not a square grid"):
        convert_paper_state_dict(odd, "ape")


def test_num_heads_override_changes_the_split(images):
    sd = paper_state_dict("rope", **SMALL)
    model = convert_paper_state_dict(sd, "rope", num_heads=4).model  # 4 heads of 24
    assert model.blocks[0].attn.num_heads == 4
    with torch.no_grad():
        got = model(images)
    torch.testing.assert_close(got.double(), reference_logits(sd, "rope", images, heads=4), rtol=1e-5, atol=1e-5)


def test_a_different_sincos_table_is_refused_or_loaded_as_a_fixed_table(tmp_path, images):
    sd = paper_state_dict("spe", **SMALL)
    sd["sincos_pe"] = sd["sincos_pe"][:, torch.randperm(96, generator=torch.Generator().manual_seed(0))]
    with pytest.raises(CheckpointError, match="differs from the paper's 2D sin-cos table.*--spe-table as-ape"):
        convert_paper_state_dict(sd, "spe")
    conv = convert_paper_state_dict(sd, "spe", spe_table="as-ape")
    assert conv.pe == "ape" and conv.spe_table == "as-ape" and conv.sincos_max_abs_diff > 0.1
    for alpha in (1.0, 0.5):
        with torch.no_grad():
            got = conv.model(images, pe_scale=alpha)
        ref = reference_logits(sd, "spe", images, 8, alpha=alpha)
        torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-5)
    # A float32 table built on another device differs by ~1e-7: that is still our sincos.
    sd = paper_state_dict("spe", **SMALL)
    sd["sincos_pe"] = sd["sincos_pe"] + 3e-6
    assert convert_paper_state_dict(sd, "spe").pe == "sincos"


# ----------------------------------------------------------------------------------------------
# The run directory: atomic, never overwritten


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_rerunning_an_import_is_a_no_op_and_a_different_one_is_refused(tmp_path):
    ape = save_paper_checkpoint(tmp_path / "ape1_imagenet_100_60.pt", paper_state_dict("ape", **SMALL, seed=1))
    other = save_paper_checkpoint(tmp_path / "ape2_imagenet_100_60.pt", paper_state_dict("ape", **SMALL, seed=2))
    out = tmp_path / "run"
    first = import_paper(ape, out)
    before = _snapshot(out)
    again = import_paper(ape, out)
    assert again["status"] == "already_imported" and again["source_sha256"] == first["source_sha256"]
    assert _snapshot(out) == before
    with pytest.raises(RunDirError, match="already holds a different run"):
        import_paper(other, out)
    with pytest.raises(RunDirError, match="different run"):
        import_paper(ape, out, num_heads=4)
    assert _snapshot(out) == before


def test_an_existing_training_run_is_never_overwritten(tmp_path):
    ckpt = save_paper_checkpoint(tmp_path / "rope1_imagenet_100_60.pt", paper_state_dict("rope", **SMALL))
    out = tmp_path / "trained"
    out.mkdir()
    (out / "config.yaml").write_text(yaml.safe_dump({"preset": "cpu", "model": {"pe": "rope"}}))
    (out / "model.safetensors").write_bytes(b"weights of another run")
    before = _snapshot(out)
    with pytest.raises(RunDirError, match="different config.yaml"):
        import_paper(ckpt, out)
    (out / "metrics.csv").write_text("epoch\n")
    with pytest.raises(RunDirError, match="holds a training run"):
        import_paper(ckpt, out)
    assert _snapshot(out) == {**before, "metrics.csv": b"epoch\n"}


def test_an_interrupted_import_is_completed(tmp_path):
    ckpt = save_paper_checkpoint(tmp_path / "ablated3_imagenet_100_60.pt", paper_state_dict("ablated", **SMALL))
    out = tmp_path / "run"
    import_paper(ckpt, out)
    (out / "summary.json").unlink()  # as if killed after the weights and the config were written
    (out / "config.yaml").unlink()
    summary = import_paper(ckpt, out)
    assert summary["status"] == "finished" and (out / "summary.json").exists() and (out / "config.yaml").exists()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries or lock left behind


# ----------------------------------------------------------------------------------------------
# The command line


def test_cli_imports_and_reports(tmp_path, capsys, images):
    sd = paper_state_dict("spe", **SMALL)
    ckpt = save_paper_checkpoint(tmp_path / "SPE1_imagenet_100_60.pt", sd)
    out = tmp_path / "run"
    assert main(["import", "paper", str(ckpt), "--condition", "SPE", "--out", str(out)]) == 0
    line = capsys.readouterr().out
    assert "condition spe → pe sincos {'cls': 'learned'}" in line and "D=96 depth=2 heads=8" in line
    with torch.no_grad():
        got = load_model(out)(images)
    torch.testing.assert_close(got.double(), reference_logits(sd, "spe", images, 8), rtol=1e-5, atol=1e-5)
    assert main(["import", "paper", str(ckpt), "--out", str(out)]) == 0
    assert "nothing done" in capsys.readouterr().out
    assert main(["import", "paper", str(ckpt), "--condition", "ape", "--out", str(out)]) == 2
    assert "named as a 'spe' checkpoint" in capsys.readouterr().err
    assert main(["import"]) == 2


def test_cli_choices_mirror_the_converter():
    assert import_command.SPE_TABLE_MODES == paper.SPE_TABLE_MODES
