"""Training: config resolution, the run directory contract, exact resume, divergence, RPT, DDP, checkpoints."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from peanchor.checkpoint.files import load_model, read_metadata, save_model, write_safetensors
from peanchor.core.errors import CheckpointError, ConfigError, RunDirError, TrainingDiverged
from peanchor.core.fileio import RunLock
from peanchor.core.interrupts import Interrupted
from peanchor.models import create_model
from peanchor.training import epoch as epoch_steps
from peanchor.training import loop
from peanchor.presets.catalog import PRESETS, resolve_config
from peanchor.training.config import TrainConfig, from_dict, load_config, to_dict, to_yaml
from peanchor.training.loop import lr_at, param_groups, train

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One scenes cache for the whole session (the tiny splits are generated once)."""
    return tmp_path_factory.mktemp("scenes-cache")


def tiny_sets(cache: Path, epochs: int = 2, train_size: int = 128, extra: tuple[str, ...] = ()) -> list[str]:
    return [
        f"data.cache_dir={cache}",
        f"data.train_size={train_size}",
        "data.val_size=40",
        "train.batch_size=32",
        "train.eval_batch_size=40",
        f"train.epochs={epochs}",
        *extra,
    ]


def tiny(cache: Path, pe: str = "ape", epochs: int = 2, rpt: bool = False, extra: tuple[str, ...] = ()) -> TrainConfig:
    """The smoke preset cut down to 4 steps per epoch."""
    return resolve_config("smoke", {"model.pe": pe, "train.rpt": rpt}, tiny_sets(cache, epochs, extra=extra))


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def snapshot(directory: Path) -> dict[str, tuple[int, str]]:
    """Every file under ``directory``: (mtime_ns, content hash)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_mtime_ns, sha(p))
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def same_weights(a: Path, b: Path) -> bool:
    """The two runs' final tensors are equal bit for bit (their metadata may differ in runtime keys)."""
    from safetensors.torch import load_file

    wa, wb = load_file(a / "model.safetensors"), load_file(b / "model.safetensors")
    return wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)


def metrics_without_seconds(run: Path) -> list[list[str]]:
    rows = [line.split(",") for line in (run / "metrics.csv").read_text().splitlines()]
    return [row[:-1] for row in rows]  # the last column is wall time


def subprocess_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PEANCHOR_CACHE"] = str(cache)
    env["OMP_NUM_THREADS"] = "1"  # the same kernels as the in-process runs (see one_thread)
    return env


# ----------------------------------------------------------------------------------------------
# Config


@pytest.mark.parametrize(
    "item, key, expected",
    [
        ("optim.lr=3e-4", "optim.lr", 3e-4),  # YAML reads 3e-4 as a string; the float field parses it
        ("optim.lr=1", "optim.lr", 1.0),
        ("model.overrides.depth=6", "model.overrides", {"depth": 6}),
        ("data.train_size=5000", "data.train_size", 5000),
        ("data.train_size=null", "data.train_size", None),
        ("optim.betas=[0.8, 0.95]", "optim.betas", (0.8, 0.95)),
        ("optim.clip_grad=null", "optim.clip_grad", None),
        ("train.rpt=true", "train.rpt", True),
        ("data.root=123", "data.root", "123"),  # a str field keeps the text
        ("model.pe_kwargs.init_std=0.02", "model.pe_kwargs", {"init_std": 0.02}),
    ],
)
def test_set_parses_and_type_checks(item, key, expected):
    cfg = resolve_config("smoke", {}, [item])
    section, _, name = key.partition(".")
    value = getattr(getattr(cfg, section), name)
    if key == "model.overrides":
        assert value["depth"] == expected["depth"]
    else:
        assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    "item, message",
    [
        ("optim.lr=fast", "optim.lr=fast: expected float"),
        ("train.epochs=1.5", "train.epochs=1.5: expected int"),
        ("train.rpt=maybe", "expected bool"),
        ("train.seed=true", "expected int"),
        ("optim.betas=[0.9]", "optim.betas"),
        ("model.overrides.depth=2.5", "model.overrides.depth"),
        ("data.img_size=4", "expected an integer >= 8"),
        ("optim.lr", "expected key=value"),
        ("model.pe=nope", "unknown positional encoding"),
    ],
)
def test_set_rejects_bad_values(item, message):
    with pytest.raises(ConfigError, match=message.replace("[", r"\[").replace(".", r"\.")):
        resolve_config("smoke", {}, [item])


def test_unknown_keys_list_the_valid_ones():
    with pytest.raises(ConfigError) as e:
        resolve_config("smoke", {}, ["optim.lrr=1"])
    assert "'optim.lrr'" in str(e.value) and "optim.lr," in str(e.value) and "optim.weight_decay" in str(e.value)
    with pytest.raises(ConfigError, match="model.overrides.depth"):
        resolve_config("smoke", {}, ["model.overrides.depthh=3"])
    with pytest.raises(ConfigError, match="valid keys here: preset, data, model, optim, train"):
        resolve_config("smoke", {}, ["trian.epochs=3"])


@pytest.mark.parametrize("preset", PRESETS)
def test_presets_resolve_and_round_trip(preset, tmp_path):
    cfg = resolve_config(preset, {}, [])
    assert cfg.preset == preset
    assert from_dict(to_dict(cfg)) == cfg
    (tmp_path / "config.yaml").write_text(to_yaml(cfg))
    assert load_config(tmp_path / "config.yaml") == cfg


def test_paper_preset_is_the_papers_setting():
    from peanchor.settings.conditions import PAPER

    paper = PRESETS["paper"]
    cfg = paper.config()
    assert cfg.data.img_size == PAPER.img_size and dict(paper.shifts) == PAPER.shifts and paper.seeds == PAPER.seeds
    model = create_model(cfg.model.name, pe="ape", num_classes=100, patch_size=cfg.model.patch_size)
    assert model.grid == (14, 14)  # 196 patches of 16 px at 224 px


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_measures_valid_shifts_at_its_own_resolution(preset):
    from peanchor.analysis.shifts import Shift

    p = PRESETS[preset]
    assert p.config() is not p.config()  # a fresh, mutable config each time
    for spec in p.shifts.values():
        shift = Shift.from_dict(dict(spec))
        assert shift.resolved(p.img_size) == shift  # every size-dependent parameter is fixed in the preset


def test_cli_flags_then_set_win_over_the_preset():
    cfg = resolve_config("cpu", {"model.pe": "rope", "train.epochs": 7, "train.seed": None}, ["train.epochs=9"])
    assert (cfg.model.pe, cfg.train.epochs, cfg.train.seed) == ("rope", 9, 0)


def test_lr_schedule_warmup_then_cosine():
    lrs = [lr_at(s, 100, 10, 1e-3, 1e-5) for s in range(100)]
    assert lrs[0] == pytest.approx(1e-4) and lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in itertools.pairwise(lrs[10:]))  # monotone decay after warmup
    assert lrs[-1] == pytest.approx(1e-5, abs=1e-6)


def test_param_groups_keep_pe_norms_biases_and_cls_out_of_weight_decay():
    model = create_model("vit_micro", pe="ape", num_classes=3)
    groups = {g["name"]: g for g in param_groups(model, 0.05, 3.0, 0.0)}
    names = {id(p): n for n, p in model.named_parameters()}
    pe = {names[id(p)] for p in groups["pe"]["params"]}
    no_decay = {names[id(p)] for p in groups["no_decay"]["params"]}
    decay = {names[id(p)] for p in groups["decay"]["params"]}
    assert pe == {"pe.table"} and groups["pe"]["lr_mult"] == 3.0 and groups["pe"]["weight_decay"] == 0.0
    assert "cls_token" in no_decay and all(n.endswith(".weight") and "norm" not in n for n in decay)
    assert any("norm1" in n for n in no_decay) and any(n.endswith(".bias") for n in no_decay)
    assert len(pe) + len(no_decay) + len(decay) == len(names)


# ----------------------------------------------------------------------------------------------
# Runs


class Recorder:
    """Wraps create_model in the loop to keep the model and every training-time token_perm."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.models: list[torch.nn.Module] = []
        self.perms: list[torch.Tensor | None] = []
        real = loop.create_model

        def create(*args, **kwargs):
            model = real(*args, **kwargs)
            forward = model.forward

            def recording_forward(images, token_perm=None, pe_scale=1.0):
                if model.training:
                    self.perms.append(None if token_perm is None else token_perm.clone())
                return forward(images, token_perm=token_perm, pe_scale=pe_scale)

            model.forward = recording_forward
            self.models.append(model)
            return model

        monkeypatch.setattr(loop, "create_model", create)


def test_train_writes_a_self_describing_run_and_load_model_matches(tmp_path, cache_dir, monkeypatch):
    rec = Recorder(monkeypatch)
    run = tmp_path / "run"
    summary = train(tiny(cache_dir, pe="rope"), run, progress=False)
    assert {p.name for p in run.iterdir()} >= {
        "config.yaml",
        "model.safetensors",
        "metrics.csv",
        "summary.json",
        "checkpoint",
    }
    assert not (run / ".lock").exists()
    assert load_config(run / "config.yaml") == tiny(cache_dir, pe="rope")
    header, *rows = (run / "metrics.csv").read_text().splitlines()
    assert header == "epoch,train_loss,train_acc,val_acc,lr,seconds" and len(rows) == 2
    for key in ("val_acc", "epochs", "seconds", "pe", "rpt", "condition", "model", "num_params", "device", "versions"):
        assert key in summary
    assert summary["status"] == "finished" and summary["condition"] == "rope" and summary["epochs"] == 2

    loaded = load_model(run)
    trained = rec.models[0].eval()
    x = torch.randn(4, 3, 16, 16)
    assert not loaded.training
    assert torch.equal(loaded(x), trained(x))
    meta = read_metadata(run / "model.safetensors")
    assert meta["format"] == "peanchor-vit/1" and meta["model_args"]["pe"] == "rope"


def test_same_seed_same_run_and_interrupted_resume_is_bit_identical(tmp_path, cache_dir):
    extra = ("model.overrides.drop_rate=0.1", "model.overrides.drop_path_rate=0.1")  # RNG inside the model too
    cfg = tiny(cache_dir, pe="ape", epochs=3, rpt=True, extra=extra)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    train(cfg, a, progress=False)
    train(cfg, b, progress=False)
    assert sha(a / "model.safetensors") == sha(b / "model.safetensors")
    assert metrics_without_seconds(a) == metrics_without_seconds(b)

    stopped = train(cfg, c, progress=False, max_epochs=1)
    assert stopped["status"] == "stopped" and not (c / "model.safetensors").exists()
    assert len((c / "metrics.csv").read_text().splitlines()) == 2
    train(cfg, c, progress=False)
    assert sha(a / "model.safetensors") == sha(c / "model.safetensors")
    assert metrics_without_seconds(a) == metrics_without_seconds(c)

    other = tiny(cache_dir, pe="ape", epochs=3, rpt=True, extra=(*extra, "train.seed=1"))
    train(other, tmp_path / "d", progress=False)
    assert sha(a / "model.safetensors") != sha(tmp_path / "d" / "model.safetensors")


def test_finished_rerun_is_a_noop(tmp_path, cache_dir):
    cfg = tiny(cache_dir, epochs=1)
    run = tmp_path / "run"
    first = train(cfg, run, progress=False)
    before = snapshot(run)
    again = train(cfg, run, progress=False)
    assert again["status"] == "already_finished" and again["val_acc"] == first["val_acc"]
    assert snapshot(run) == before


def test_different_config_is_refused_and_nothing_is_touched(tmp_path, cache_dir):
    run = tmp_path / "run"
    train(tiny(cache_dir, epochs=1), run, progress=False)
    before, dir_mtime = snapshot(run), run.stat().st_mtime_ns
    changed = tiny(cache_dir, epochs=1, extra=("optim.lr=3e-4", "train.seed=5"))
    with pytest.raises(RunDirError, match=r"optim\.lr: 0\.001 -> 0\.0003.*train\.seed: 0 -> 5"):
        train(changed, run, progress=False)
    assert snapshot(run) == before and run.stat().st_mtime_ns == dir_mtime


def test_a_failed_start_leaves_no_directory_and_no_config(tmp_path, cache_dir):
    run = tmp_path / "run"
    with pytest.raises(ConfigError, match="unknown dataset"):
        train(tiny(cache_dir, extra=("data.name=nope",)), run, progress=False)
    assert not run.exists()
    train(tiny(cache_dir, epochs=1), run, progress=False)  # the corrected command is not refused
    assert (run / "summary.json").exists()


def test_a_locked_run_dir_is_refused(tmp_path, cache_dir):
    run = tmp_path / "run"
    with RunLock(run), pytest.raises(RunDirError, match="in use"):  # held by this (live) process
        train(tiny(cache_dir, epochs=1), run, progress=False)
    assert not (run / "model.safetensors").exists()


def test_nonfinite_loss_stops_and_keeps_the_last_checkpoint(tmp_path, cache_dir, monkeypatch):
    cfg = tiny(cache_dir, epochs=3)
    run = tmp_path / "run"
    train(cfg, run, progress=False, max_epochs=1)
    before = snapshot(run)
    log_before = (run / "train.log").read_text()
    real_lr = epoch_steps.lr_at
    # lr 1e12 from global step 5 (epoch 2 step 2) on: that update makes the loss of epoch 2 step 3 non-finite. The
    # loss is read only at the end of the epoch (log_every 50), yet the message names the first bad step.
    monkeypatch.setattr(epoch_steps, "lr_at", lambda step, *a: 1e12 if step >= 5 else real_lr(step, *a))
    with pytest.raises(TrainingDiverged, match=r"loss became (nan|inf) at epoch 2 step 3; lower optim\.lr"):
        train(cfg, run, progress=False)
    after = snapshot(run)
    assert {k: v for k, v in after.items() if k != "train.log"} == {k: v for k, v in before.items() if k != "train.log"}
    assert (run / "train.log").read_text().startswith(log_before)  # the log only grew
    assert not (run / ".lock").exists() and not (run / "model.safetensors").exists()


def test_huge_lr_from_the_cli_is_one_line_exit_3(tmp_path, cache_dir, capsys):
    from peanchor.cli import main

    out = tmp_path / "run"
    args = ["train", "--preset", "smoke", "--pe", "ape", "--out", str(out), "--no-progress"]
    args += [
        a for s in tiny_sets(cache_dir, epochs=1, extra=("optim.lr=1e12", "optim.clip_grad=null")) for a in ("--set", s)
    ]
    code = main(args)
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and err[-1].startswith("peanchor: error: loss became") and "Traceback" not in "".join(err)


def test_unknown_pe_from_the_cli_is_a_config_error(capsys):
    from peanchor.cli import main

    assert main(["train", "--preset", "smoke", "--pe", "nope"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("peanchor: error: --pe nope: unknown") and "valid: none, ape" in err and "\n" not in err


@pytest.mark.parametrize("rpt", [True, False])
def test_rpt_gives_a_fresh_permutation_on_every_step(tmp_path, cache_dir, monkeypatch, rpt):
    rec = Recorder(monkeypatch)
    train(tiny(cache_dir, pe="ape", epochs=2, rpt=rpt), tmp_path / "run", progress=False)
    n = rec.models[0].num_patches
    assert len(rec.perms) == 8  # 2 epochs × 4 steps
    if not rpt:
        assert all(p is None for p in rec.perms)
        return
    assert all(p.shape == (n,) and torch.equal(p.sort().values, torch.arange(n)) for p in rec.perms)
    distinct = {tuple(p.tolist()) for p in rec.perms}
    assert len(distinct) == len(rec.perms)


# ----------------------------------------------------------------------------------------------
# Processes: kill -9 and resume, DDP


@pytest.mark.slow
def test_kill_9_mid_run_then_rerun_gives_identical_weights(tmp_path, cache_dir):
    sets = tiny_sets(cache_dir, epochs=4, train_size=256)
    reference = tmp_path / "reference"
    train(resolve_config("smoke", {"model.pe": "sincos"}, sets), reference, progress=False)

    run = tmp_path / "killed"
    cmd = [
        sys.executable,
        "-m",
        "peanchor",
        "train",
        "--preset",
        "smoke",
        "--pe",
        "sincos",
        "--out",
        str(run),
        "--no-progress",
    ]
    cmd += [a for s in sets for a in ("--set", s)]
    env = subprocess_env(cache_dir)
    proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    state = run / "checkpoint" / "state.safetensors"
    deadline = time.monotonic() + 60
    while not state.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert state.exists(), "the run never wrote its first checkpoint"
    assert not (run / "summary.json").exists(), "the run finished before it could be killed"

    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert "resuming" in done.stderr and "final val acc" in done.stdout
    assert sha(run / "model.safetensors") == sha(reference / "model.safetensors")
    assert metrics_without_seconds(run) == metrics_without_seconds(reference)


def torchrun(run: Path, sets: list[str], cache: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
           "-m", "peanchor", "train", "--preset", "smoke", "--pe", "ape", "--rpt", "--out", str(run), "--no-progress",
           "--device", "cpu"]  # fmt: skip
    cmd += [a for s in sets for a in ("--set", s)]
    return subprocess.Popen(cmd, cwd=run.parent, env=subprocess_env(cache), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


@pytest.mark.slow
def test_ddp_two_gloo_processes_train_like_one_and_resume_exactly_after_sigterm(tmp_path, cache_dir):
    """2 gloo ranks = 1 process (the same images per step; no dropout, no per-rank augmentation draws) up to float
    rounding; torchrun's SIGTERM reaches both ranks, which agree on a step, checkpoint and stop; the rerun ends
    bit-identical to an uninterrupted 2-rank run."""
    from safetensors.torch import load_file

    sets = tiny_sets(cache_dir, epochs=3, train_size=1024, extra=("data.augment=none", "train.log_every=4"))
    ddp, stopped, single = tmp_path / "ddp", tmp_path / "stopped", tmp_path / "single"
    first = torchrun(ddp, sets, cache_dir)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-3000:]
    assert out.count("final val acc") == 1  # rank 0 alone reports
    summary = json.loads((ddp / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["condition"] == "rpt" and summary["speed"]["fused_adamw"] is False
    assert len((ddp / "metrics.csv").read_text().splitlines()) == 4
    assert load_model(ddp).pe_name == "ape"

    train(resolve_config("smoke", {"model.pe": "ape", "train.rpt": True}, sets), single, progress=False)
    a, b = load_file(ddp / "model.safetensors"), load_file(single / "model.safetensors")
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-4, f"2 ranks and 1 process differ by {worst:g}"

    proc = torchrun(stopped, sets, cache_dir)
    deadline = time.monotonic() + 300
    while not ((stopped / "train.log").exists() and "epoch 1/3" in (stopped / "train.log").read_text()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    proc.send_signal(signal.SIGTERM)  # to torchrun, which passes it on to the ranks
    _, err = proc.communicate(timeout=120)
    assert err.count("peanchor: stopped by SIGTERM: saved") == 2, err[-3000:]  # each rank, at the same step
    assert not (stopped / ".lock").exists() and not (stopped / "model.safetensors").exists()
    again = torchrun(stopped, sets, cache_dir)
    _, err = again.communicate(timeout=300)
    assert again.returncode == 0 and "resuming" in err, err[-3000:]
    assert same_weights(stopped, ddp)
    assert metrics_without_seconds(stopped) == metrics_without_seconds(ddp)


# ----------------------------------------------------------------------------------------------
# Checkpoints


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("name", ["evil.pt", "evil.safetensors"])
def test_load_model_never_unpickles(tmp_path, name):
    marker = tmp_path / "marker"
    path = tmp_path / name
    torch.save({"model": _Payload(marker)}, path)
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_model(path)
    assert not marker.exists()


def test_load_model_rejects_damaged_and_foreign_files(tmp_path):
    from safetensors.torch import save_file

    model = create_model("vit_micro", pe="ape", num_classes=3)
    good = tmp_path / "m.safetensors"
    save_model(model, good)
    cases = {
        "missing.safetensors": None,
        "truncated.safetensors": good.read_bytes()[:-100],
        "empty.safetensors": b"",
        "junk.safetensors": b"not a checkpoint at all" * 4,
    }
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(CheckpointError) as e:
            load_model(tmp_path / name)
        assert "\n" not in str(e.value) and name in str(e.value)

    save_file({"w": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    with pytest.raises(CheckpointError, match="without peanchor model_args"):
        load_model(tmp_path / "foreign.safetensors")
    other = create_model("vit_micro", pe="none", num_classes=3)  # no pe.table
    tensors = {k: v.contiguous() for k, v in other.state_dict().items()}
    write_safetensors(tmp_path / "mismatch.safetensors", tensors, {"model_args": json.dumps(model.model_args)})
    with pytest.raises(CheckpointError, match="missing pe.table"):
        load_model(tmp_path / "mismatch.safetensors")
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_model(tmp_path)


def test_save_model_is_byte_reproducible(tmp_path):
    model = create_model("vit_micro", pe="sincos", num_classes=3)
    save_model(model, tmp_path / "a.safetensors", {"x": 1, "y": "two", "z": [3]})
    save_model(model, tmp_path / "b.safetensors", {"z": [3], "y": "two", "x": 1})
    assert sha(tmp_path / "a.safetensors") == sha(tmp_path / "b.safetensors")


# ----------------------------------------------------------------------------------------------
# Keyed streams, mid-epoch resume, stop signals, logs, settings


class SignalAt:
    """A hook that sends ``sig`` to this process at the log interval of global step ``step`` (log_every=1)."""

    def __init__(self, at: int, sig: int = signal.SIGTERM) -> None:
        self.at, self.sig = at, sig

    def step(self, step, *, loss, lr):
        if step == self.at:
            os.kill(os.getpid(), self.sig)

    def epoch(self, row, *, step, images, seconds):
        pass


def test_epoch_batches_are_the_same_images_for_any_process_count_and_resume_anywhere():
    from peanchor.training.sampling import EpochBatches

    one = EpochBatches(50, 8, seed=3)
    ranks = [EpochBatches(50, 8, seed=3, rank=r, world_size=4) for r in range(4)]
    for sampler in (one, *ranks):
        sampler.set_epoch(2)
    merged = [sorted(sum(parts, [])) for parts in zip(*ranks)]
    assert merged == [sorted(b) for b in one] and len(merged) == 50 // 8
    assert all(key[0] == 2 for batch in one for key in batch)  # keyed by epoch for the per-sample streams
    flat = [i for batch in one for _, i in batch]
    assert len(set(flat)) == len(flat)  # no image twice within an epoch
    full = list(one)
    one.set_epoch(2, start=4)
    assert list(one) == full[4:]
    one.set_epoch(3)
    assert list(one) != full  # a new order every epoch


@pytest.mark.parametrize("workers", [0, 2])
def test_per_image_augmentation_does_not_depend_on_the_loader_workers(workers):
    """Each image's random crop/flip is drawn from its own (seed, epoch, index) stream."""
    import numpy as np
    from torch.utils.data import DataLoader
    from torchvision.transforms import v2

    from peanchor.data import ArrayDataset
    from peanchor.training.sampling import EpochBatches, SampleStreams

    images = np.random.default_rng(0).integers(0, 256, (24, 3, 16, 16), dtype=np.uint8)
    plain = ArrayDataset(images, list(range(24)), img_size=16)

    class PerItem(torch.utils.data.Dataset):  # an image-file dataset: a v2 transform per item
        transform = v2.Compose([v2.RandomResizedCrop(16, scale=(0.3, 1.0), antialias=True), v2.RandomHorizontalFlip()])

        def __len__(self):
            return len(plain)

        def __getitem__(self, i):
            image, label = plain[i]
            return self.transform(image), label

    def batches(num_workers):
        sampler = EpochBatches(24, 6, seed=1)
        sampler.set_epoch(5)
        loader = DataLoader(SampleStreams(PerItem(), 1, random=True), batch_sampler=sampler, num_workers=num_workers)
        return [x for x, _ in loader]

    reference = batches(0)
    assert all(torch.equal(a, b) for a, b in zip(batches(workers), reference, strict=True))
    assert not torch.equal(reference[0], torch.stack([plain[i][0] for i in range(6)]))  # it does augment


def test_resume_mid_epoch_after_sigterm_with_another_worker_count_is_bit_identical(tmp_path, cache_dir):
    extra = ("model.overrides.drop_rate=0.1", "model.overrides.drop_path_rate=0.1", "train.log_every=1")
    reference, run = tmp_path / "reference", tmp_path / "run"
    train(tiny(cache_dir, pe="ape", epochs=2, rpt=True, extra=extra), reference, progress=False)

    # Workers 2, SIGTERM at the end of global step 6 (epoch 2, step 2 of 4), after that step's stop check: the
    # loop saves after step 7 and stops.
    stopped = tiny(cache_dir, pe="ape", epochs=2, rpt=True, extra=(*extra, "train.num_workers=2"))
    with pytest.raises(Interrupted, match=r"SIGTERM: saved at epoch 2 step 3/4") as e:
        train(stopped, run, progress=False, hooks=[SignalAt(6)])
    assert e.value.exit_code == 143 and not (run / ".lock").exists() and not (run / "model.safetensors").exists()
    from peanchor.training.state import read_state_epoch

    assert read_state_epoch(run / "checkpoint" / "state.safetensors") == 1
    assert "checkpoint at epoch 2 step 3/4" in (run / "train.log").read_text()

    resumed = tiny(cache_dir, pe="ape", epochs=2, rpt=True, extra=(*extra, "train.num_workers=1"))
    assert train(resumed, run, progress=False)["status"] == "finished"
    assert same_weights(run, reference)
    assert metrics_without_seconds(run) == metrics_without_seconds(reference)


def test_sigint_stops_at_an_epoch_end_when_it_comes_in_the_last_step(tmp_path, cache_dir):
    cfg = tiny(cache_dir, epochs=3, extra=("train.log_every=1",))
    run = tmp_path / "run"
    with pytest.raises(Interrupted, match="SIGINT: saved after epoch 1/3") as e:
        train(cfg, run, progress=False, hooks=[SignalAt(4, signal.SIGINT)])  # step 4 ends epoch 1
    assert e.value.exit_code == 130 and len((run / "metrics.csv").read_text().splitlines()) == 2
    train(cfg, run, progress=False)
    reference = tmp_path / "reference"
    train(cfg, reference, progress=False)
    assert sha(run / "model.safetensors") == sha(reference / "model.safetensors")


def test_checkpoints_and_log_intervals_do_not_change_the_numbers(tmp_path, cache_dir, monkeypatch):
    reads = []
    real_read = epoch_steps._read
    monkeypatch.setattr(epoch_steps, "_read", lambda *a: reads.append(1) or real_read(*a))
    base = tiny(cache_dir, epochs=2, extra=("train.log_every=50",))
    train(base, tmp_path / "a", progress=False)
    assert len(reads) == 2  # one read of the loss per epoch (at its last step), no host sync per step
    reads.clear()
    busy = tiny(cache_dir, epochs=2, extra=("train.log_every=1", "train.checkpoint_every=3"))
    train(busy, tmp_path / "b", progress=False)
    assert len(reads) == 8
    assert same_weights(tmp_path / "a", tmp_path / "b")
    assert metrics_without_seconds(tmp_path / "a") == metrics_without_seconds(tmp_path / "b")


def test_the_device_may_change_on_resume_but_not_its_type(tmp_path, cache_dir):
    from peanchor.training.state import load_train_state, save_train_state

    run, reference = tmp_path / "run", tmp_path / "reference"
    train(tiny(cache_dir, epochs=2, extra=("train.device=cpu",)), run, progress=False, max_epochs=1)
    train(tiny(cache_dir, epochs=2, extra=("train.device=auto",)), run, progress=False)  # resolves to cpu here
    train(tiny(cache_dir, epochs=2, extra=("train.device=cpu",)), reference, progress=False)
    assert same_weights(run, reference)

    moved = tmp_path / "moved"
    cfg = tiny(cache_dir, epochs=2)
    train(cfg, moved, progress=False, max_epochs=1)
    path = moved / "checkpoint" / "state.safetensors"
    model = loop.build_model(cfg, 10, 16)
    optimizer = torch.optim.AdamW(param_groups(model, 0.05, 1.0, 0.0))
    state = load_train_state(path, model, optimizer)
    state.device_type = "cuda"  # as if the first epoch had run on a GPU
    save_train_state(path, model, optimizer, state, to_dict(cfg))
    with pytest.raises(RunDirError, match="trained on cuda and this run would continue it on cpu"):
        train(cfg, moved, progress=False)


def test_without_a_terminal_each_epoch_is_one_line_on_stderr_and_in_train_log(tmp_path, cache_dir, capsys):
    from peanchor.cli import main

    out = tmp_path / "run"
    args = ["train", "--preset", "smoke", "--out", str(out)]  # progress bars on: they switch off without a TTY
    assert main([*args, *(a for s in tiny_sets(cache_dir, epochs=3) for a in ("--set", s))]) == 0
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if " epoch " in line]
    assert len(lines) == 3 and len(err) == 4, err  # + the "finished" line
    for k, line in enumerate(lines, 1):
        assert re.fullmatch(
            rf"peanchor: run epoch {k}/3 loss \d\.\d{{4}} acc \d\.\d{{4}} val_acc \d\.\d{{4}} lr \S+ [\d,]+ img/s "
            r"eta \d+:\d\d:\d\d",
            line,
        ), line
    log = (out / "train.log").read_text().splitlines()
    assert [line.split(" ", 1)[1] for line in log if " epoch " in line] == [x.split(" ", 2)[2] for x in lines]
    assert log[0].split(" ", 1)[1].startswith("training none (vit_micro, 3 epochs of 4 steps) on cpu")


def test_hooks_get_every_interval_and_epoch(tmp_path, cache_dir):
    class Recording:
        def __init__(self):
            self.intervals, self.epochs = [], []

        def step(self, step, *, loss, lr):
            self.intervals.append((step, loss, lr))

        def epoch(self, row, *, step, images, seconds):
            self.epochs.append((row["epoch"], step, row["val_acc"], row["train_loss"], images, seconds))

    hook, other = Recording(), Recording()
    summary = train(tiny(cache_dir, epochs=2, extra=("train.log_every=2",)), tmp_path / "run", progress=False,
                    tracker=hook, hooks=[other])  # fmt: skip
    assert [s for s, _, _ in hook.intervals] == [2, 4, 6, 8] and other.intervals == hook.intervals
    assert hook.intervals[1][1] == pytest.approx(hook.epochs[0][3])  # the running loss at the epoch's end is its mean
    assert [(e, s) for e, s, *_ in hook.epochs] == [(1, 4), (2, 8)] and hook.epochs[-1][2] == summary["val_acc"]
    assert all(images == 4 * 32 and seconds > 0 for *_, images, seconds in hook.epochs)


def test_the_settings_in_effect_are_reported_and_the_cpu_path_keeps_its_defaults(tmp_path, cache_dir):
    summary = train(tiny(cache_dir, epochs=1), tmp_path / "run", progress=False)
    assert summary["speed"] == {
        "amp_bf16": False, "tf32": False, "cudnn_benchmark": False, "fused_adamw": False, "compile": False,
        "augment_on_device": "translate", "num_workers": 0, "persistent_workers": False, "pin_memory": False,
        "prefetch": "none",
    }  # fmt: skip
    assert torch.backends.cuda.matmul.fp32_precision in ("none", "ieee")  # CUDA flags untouched on a CPU run


def test_ddp_does_not_broadcast_the_constant_buffers():
    import torch.distributed as dist

    from peanchor.training.distributed import DistContext
    from peanchor.training.step import wrap_ddp

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        model = create_model("vit_micro", pe="relbias", num_classes=3)
        assert dict(model.named_buffers())  # the relative-position index: a constant
        wrapped = wrap_ddp(model, DistContext(rank=0, world_size=2))
        assert getattr(wrapped, "forward_sync_buffers", getattr(wrapped, "broadcast_buffers", None)) is False
        assert wrap_ddp(model, DistContext()) is model  # one process: no wrapper at all
    finally:
        dist.destroy_process_group()


def test_under_torchrun_an_explicit_gpu_is_refused(monkeypatch):
    from peanchor.training.distributed import setup_distributed

    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with pytest.raises(ConfigError, match=r"train\.device='cuda:0' under torchrun .* use --device cuda"):
        setup_distributed("cuda:0")


def test_the_paper_preset_decays_every_parameter_and_does_not_clip():
    cfg = PRESETS["paper"].config()
    o = cfg.optim
    assert (o.weight_decay, o.pe_weight_decay, o.decay_norms_biases, o.clip_grad) == (0.05, 0.05, True, None)
    model = create_model(cfg.model.name, pe="ape", num_classes=100, patch_size=cfg.model.patch_size)
    groups = param_groups(model, o.weight_decay, o.pe_lr_mult, o.pe_weight_decay, o.decay_norms_biases)
    decayed = [p for g in groups if g["weight_decay"] == 0.05 and g["lr_mult"] == 1.0 for p in g["params"]]
    assert len(decayed) == len(list(model.parameters()))  # a plain AdamW(model.parameters(), weight_decay=0.05)
    assert model.head_drop.p == 0.0 and model.pos_drop.p == 0.15  # dropout on the embedding, attention, MLP only
    rates = [b.drop_path.p for b in model.blocks]
    assert rates[0] == 0.0 and rates[-1] == pytest.approx(0.2)  # stochastic depth 0.2, timm's linear rule
