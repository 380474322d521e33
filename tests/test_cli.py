"""Bad inputs for every CLI entry point: one clear line, a non-zero exit, nothing of the user's touched.

Every case runs ``peanchor.cli.main`` in-process (fast) and checks that

* the exit code is not 0;
* stderr holds exactly one line, starting ``peanchor: error:`` and naming the problem (a path, key
  or value);
* no traceback is printed, and ``--debug`` re-raises instead (a traceback for developers);
* the workspace (user files, datasets, a finished run) hashes the same before and after, and the
  ``--out`` the case names was not created.

A few cases also run as real subprocesses (warnings and import-time noise would show up there).
Untrusted checkpoints (a pickle whose unpickling would run a shell command) are refused by
``load_model``, ``analyze`` and ``import paper`` without the command ever running.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from torchvision.io import encode_jpeg

from peanchor.checkpoint.files import load_model
from peanchor.cli import main
from peanchor.core.errors import CheckpointError, PeanchorError

# ----------------------------------------------------------------------------------------------
# Helpers


def tree_digest(root: Path) -> dict[str, str]:
    """relative path -> sha256 of every file (and ``dir`` / ``link -> target`` for the others) under root."""
    out: dict[str, str] = {}
    if not root.exists():
        return out
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}"
        elif path.is_dir():
            out[rel] = "dir"
        else:
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``peanchor argv`` in-process: (exit code, stdout, stderr). argparse's own exits are caught."""
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_error_line(code: int, err: str, match: str) -> str:
    assert code != 0, "expected a non-zero exit code"
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected exactly one line on stderr, got {len(lines)}:\n{err}"
    line = lines[0]
    assert line.startswith("peanchor: error:"), line
    assert match.lower() in line.lower(), f"{match!r} not named in: {line}"
    return line


def subprocess_env(cache: Path) -> dict[str, str]:
    # One thread: tiny models run fastest so, and a busy machine then has no oversubscription.
    return {**os.environ, "PEANCHOR_CACHE": str(cache), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


class Evil:
    """Unpickling this runs ``touch MARKER``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def write_jpeg(path: Path, seed: int, size: int = 20) -> None:
    g = torch.Generator().manual_seed(seed)
    image = torch.randint(0, 256, (3, size, size), dtype=torch.uint8, generator=g)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_jpeg(image, quality=90).numpy().tobytes())


def paper_like_state_dict(dim: int = 16, depth: int = 1, patch: int = 4, grid: int = 2, classes: int = 3) -> dict:
    """A tiny state dict with the paper's key names (enough to pass the layout check of an import)."""
    g = torch.Generator().manual_seed(0)
    n = grid * grid
    sd = {
        "patcher.conv.weight": torch.randn(dim, 3, patch, patch, generator=g),
        "patcher.conv.bias": torch.zeros(dim),
        "cls_token": torch.randn(1, 1, dim, generator=g),
        "pos_embedding.weight": torch.randn(n + 1, dim, generator=g),
        "final_feed_forward.weight": torch.randn(classes, dim, generator=g),
        "final_feed_forward.bias": torch.zeros(classes),
    }
    for i in range(depth):
        sd |= {
            f"encoder_layers.{i}.0.weight": torch.ones(dim),
            f"encoder_layers.{i}.0.bias": torch.zeros(dim),
            f"encoder_layers.{i}.1.qkv.weight": torch.randn(3 * dim, dim, generator=g),
            f"encoder_layers.{i}.1.qkv.bias": torch.zeros(3 * dim),
            f"encoder_layers.{i}.1.proj.weight": torch.randn(dim, dim, generator=g),
            f"encoder_layers.{i}.1.proj.bias": torch.zeros(dim),
            f"feed_forward.{i}.0.weight": torch.ones(dim),
            f"feed_forward.{i}.0.bias": torch.zeros(dim),
            f"feed_forward.{i}.1.0.weight": torch.randn(4 * dim, dim, generator=g),
            f"feed_forward.{i}.1.0.bias": torch.zeros(4 * dim),
            f"feed_forward.{i}.1.3.weight": torch.randn(dim, 4 * dim, generator=g),
            f"feed_forward.{i}.1.3.bias": torch.zeros(dim),
        }
    return sd


# ----------------------------------------------------------------------------------------------
# The workspace: user files, datasets good and bad, a finished run and damaged copies of it


@pytest.fixture(scope="module")
def ws(tmp_path_factory: pytest.TempPathFactory, cache: Path) -> Iterator[Path]:
    """A workspace built once per module (one tiny training run, in-process, one thread)."""
    root = tmp_path_factory.mktemp("workspace")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PEANCHOR_CACHE", str(cache))
        (root / "user_notes.txt").write_text("the user's own file\n")
        (root / "empty_ds").mkdir()
        for split in ("train", "val"):  # a folder dataset with class folders but no images in them
            (root / "no_images" / split / "c0").mkdir(parents=True)
        for split in ("train", "val"):  # every image corrupt
            for i in range(3):
                path = root / "corrupt_ds" / split / "c0" / f"{i}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(b"\xff\xd8\xff\xe0 this is not really a JPEG" + bytes(range(64)))
        for split in ("train", "val"):
            for c in range(2):
                for i in range(3):
                    write_jpeg(root / "good_ds" / split / f"c{c}" / f"{i}.jpg", seed=100 * c + i)
        (root / "classes.txt").write_text("n01440764\nn01443537\n")
        (root / "bad.json").write_text("{not json")
        (root / "list.json").write_text("[]\n")
        (root / "random.bin").write_bytes(os.urandom(4096))
        save_file({"w": torch.zeros(3)}, str(root / "foreign.safetensors"))  # no model_args
        torch.save(Evil(root / "MARKER"), root / "evil.pt")
        torch.save({"model": paper_like_state_dict()}, root / "paper_ok.pt")
        raw = (root / "paper_ok.pt").read_bytes()
        (root / "paper_truncated.pt").write_bytes(raw[: len(raw) // 2])

        code = main(["train", "--preset", "smoke", "--out", str(root / "run_ok"), "--no-progress"])
        assert code == 0
        model_bytes = (root / "run_ok" / "model.safetensors").read_bytes()
        damaged = {
            "run_truncated": model_bytes[: len(model_bytes) // 2],
            "run_random": os.urandom(len(model_bytes)),
            "run_foreign": (root / "foreign.safetensors").read_bytes(),
            "run_pickle": (root / "evil.pt").read_bytes(),
            "run_empty": b"",
        }
        for name, data in damaged.items():
            shutil.copytree(root / "run_ok", root / name)
            (root / name / "model.safetensors").write_bytes(data)
        code = main(
            [
                "data",
                "prepare",
                "--data",
                "imagefolder",
                "--data-root",
                str(root / "good_ds"),
                "--img-size",
                "16",
                "--out",
                str(root / "prepared_ok"),
            ]
        )
        assert code == 0
    torch.set_num_threads(threads)
    yield root
    assert not (root / "MARKER").exists(), "a pickle was unpickled: MARKER was created"


@pytest.fixture
def new(tmp_path: Path) -> Path:
    """An --out that does not exist (and must not be created by a refused command)."""
    return tmp_path / "new_out"


pytestmark = pytest.mark.usefixtures("in_process")


# ----------------------------------------------------------------------------------------------
# The cases: (argv with {ws}/{new} placeholders, what the error line must name)

SMOKE = ["--preset", "smoke", "--no-progress"]
# The tiny folder datasets here hold 3-6 images per split (used whole: the smoke preset's scenes sizes do not apply).
FOLDER_SIZES = ["--set", "train.batch_size=2"]

CASES = [
    # train
    ("train-unknown-pe", ["train", *SMOKE, "--pe", "bogus_pe", "--out", "{new}"], "bogus_pe"),
    ("train-unknown-model", ["train", *SMOKE, "--model", "vit_huge", "--out", "{new}"], "vit_huge"),
    ("train-unknown-dataset", ["train", *SMOKE, "--data", "bogus_ds", "--out", "{new}"], "bogus_ds"),
    pytest.param(
        "train-unknown-preset",
        ["train", "--preset", "bogus_preset", "--out", "{new}"],
        "bogus_preset",
        id="train-unknown-preset",
    ),
    pytest.param(
        "train-flag-wrong-type",
        ["train", *SMOKE, "--epochs", "abc", "--out", "{new}"],
        "abc",
        id="train-flag-wrong-type",
    ),
    ("train-set-wrong-type", ["train", *SMOKE, "--set", "optim.lr=abc", "--out", "{new}"], "optim.lr"),
    ("train-set-wrong-type-int", ["train", *SMOKE, "--set", "train.epochs=1.5", "--out", "{new}"], "train.epochs"),
    ("train-set-unknown-key", ["train", *SMOKE, "--set", "optim.bogus_key=1", "--out", "{new}"], "optim.bogus_key"),
    ("train-set-unknown-section", ["train", *SMOKE, "--set", "bogus.key=1", "--out", "{new}"], "bogus.key"),
    ("train-set-not-key-value", ["train", *SMOKE, "--set", "optim.lr", "--out", "{new}"], "key=value"),
    (
        "train-missing-data-root",
        ["train", *SMOKE, "--data", "imagefolder", "--data-root", "{ws}/nonexistent", "--out", "{new}"],
        "nonexistent",
    ),
    (
        "train-empty-dataset-dir",
        ["train", *SMOKE, "--data", "imagefolder", "--data-root", "{ws}/empty_ds", "--out", "{new}"],
        "empty_ds",
    ),
    (
        "train-dataset-without-images",
        ["train", *SMOKE, "--data", "imagefolder", "--data-root", "{ws}/no_images", "--out", "{new}"],
        "no_images",
    ),
    (
        "train-corrupt-images",
        [
            "train",
            *SMOKE,
            "--data",
            "imagefolder",
            "--data-root",
            "{ws}/corrupt_ds",
            "--img-size",
            "16",
            *FOLDER_SIZES,
            "--out",
            "{new}",
        ],
        "decoded",
    ),
    pytest.param(
        "train-out-is-a-file",
        ["train", *SMOKE, "--out", "{ws}/user_notes.txt"],
        "user_notes.txt",
        id="train-out-is-a-file",
    ),
    ("train-conflicting-rerun", ["train", *SMOKE, "--pe", "ape", "--out", "{ws}/run_ok"], "different config"),
    # analyze
    ("analyze-no-run-dir", ["analyze"], "RUN_DIR"),
    ("analyze-missing-dir", ["analyze", "{ws}/nonexistent"], "nonexistent"),
    ("analyze-not-a-run-dir", ["analyze", "{ws}/empty_ds"], "config.yaml"),
    ("analyze-truncated-checkpoint", ["analyze", "{ws}/run_truncated", "--out", "{new}"], "truncated"),
    ("analyze-empty-checkpoint", ["analyze", "{ws}/run_empty", "--out", "{new}"], "model.safetensors"),
    ("analyze-random-checkpoint", ["analyze", "{ws}/run_random", "--out", "{new}"], "model.safetensors"),
    ("analyze-foreign-checkpoint", ["analyze", "{ws}/run_foreign", "--out", "{new}"], "model_args"),
    ("analyze-pickle-checkpoint", ["analyze", "{ws}/run_pickle", "--out", "{new}"], "pickle"),
    ("analyze-unknown-dataset", ["analyze", "{ws}/run_ok", "--data", "bogus_ds", "--out", "{new}"], "bogus_ds"),
    ("analyze-bad-alphas", ["analyze", "{ws}/run_ok", "--alphas", "1,x", "--out", "{new}"], "--alphas"),
    ("analyze-unknown-shift-kind", ["analyze", "{ws}/run_ok", "--shift", "jpg:quality=5", "--out", "{new}"], "jpg"),
    ("analyze-shift-out-of-range", ["analyze", "{ws}/run_ok", "--shift", "jpeg:quality=101"], "1..100"),
    ("analyze-shift-unknown-key", ["analyze", "{ws}/run_ok", "--shift", "blur:radius=3", "--out", "{new}"], "radius"),
    ("analyze-negative-images", ["analyze", "{ws}/run_ok", "--images", "0", "--out", "{new}"], "analysis.max_images=0"),
    ("analyze-zero-rpi-draws", ["analyze", "{ws}/run_ok", "--rpi-draws", "0", "--out", "{new}"], "analysis.rpi_draws=0"),
    ("analyze-unknown-plan-key", ["analyze", "{ws}/run_ok", "--set", "analysis.draws=2", "--out", "{new}"],
     "unknown analysis key 'analysis.draws'"),
    (
        "analyze-empty-dataset",
        ["analyze", "{ws}/run_ok", "--data", "imagefolder", "--data-root", "{ws}/empty_ds", "--out", "{new}"],
        "empty_ds",
    ),
    (
        "analyze-missing-data-root",
        ["analyze", "{ws}/run_ok", "--data", "imagefolder", "--data-root", "{ws}/nonexistent", "--out", "{new}"],
        "nonexistent",
    ),
    # reproduce
    (
        "reproduce-unknown-condition",
        ["reproduce", *SMOKE, "--conditions", "none,bogus_pe", "--out", "{new}"],
        "bogus_pe",
    ),
    pytest.param(
        "reproduce-unknown-preset",
        ["reproduce", "--preset", "bogus_preset", "--out", "{new}"],
        "bogus_preset",
        id="reproduce-unknown-preset",
    ),
    (
        "reproduce-set-wrong-type",
        ["reproduce", *SMOKE, "--conditions", "none", "--set", "optim.lr=abc", "--out", "{new}"],
        "optim.lr",
    ),
    (
        "reproduce-set-unknown-key",
        ["reproduce", *SMOKE, "--conditions", "none", "--set", "optim.bogus_key=1", "--out", "{new}"],
        "optim.bogus_key",
    ),
    (
        "reproduce-set-unknown-condition-prefix",
        ["reproduce", *SMOKE, "--conditions", "none", "--set", "rope:optim.lr=1e-3", "--out", "{new}"],
        "rope",
    ),
    (
        "reproduce-set-bad-analysis-value",
        ["reproduce", *SMOKE, "--conditions", "none", "--set", "analysis.rpi_draws=0", "--out", "{new}"],
        "analysis.rpi_draws=0: expected an integer >= 1",
    ),
    (
        "reproduce-set-analysis-key-for-one-condition",
        ["reproduce", *SMOKE, "--conditions", "none", "--set", "none:analysis.rpi_draws=2", "--out", "{new}"],
        "the analysis plan is the same for every cell",
    ),
    ("reproduce-bad-shard", ["reproduce", *SMOKE, "--conditions", "none", "--shard", "3/2", "--out", "{new}"], "3/2"),
    (
        "reproduce-negative-sigma",
        ["reproduce", *SMOKE, "--conditions", "none", "--shift", "blur:sigma=-1", "--out", "{new}"],
        "sigma",
    ),
    (
        "reproduce-zero-seeds",
        ["reproduce", *SMOKE, "--conditions", "none", "--seeds", "0", "--out", "{new}"],
        "--seeds",
    ),
    (
        "reproduce-missing-data-root",
        [
            "reproduce",
            *SMOKE,
            "--conditions",
            "none",
            "--data",
            "imagefolder",
            "--data-root",
            "{ws}/nonexistent",
            "--out",
            "{new}",
        ],
        "nonexistent",
    ),
    # report
    ("report-missing-path", ["report", "{ws}/nonexistent"], "nonexistent"),
    ("report-dir-without-results", ["report", "{ws}/empty_ds"], "results.json"),
    ("report-invalid-json", ["report", "{ws}/bad.json"], "bad.json"),
    ("report-wrong-schema", ["report", "{ws}/list.json"], "list.json"),
    # data
    ("data-prepare-unknown-dataset", ["data", "prepare", "--data", "bogus_ds", "--out", "{new}"], "bogus_ds"),
    (
        "data-prepare-missing-root",
        ["data", "prepare", "--data", "imagefolder", "--data-root", "{ws}/nonexistent", "--out", "{new}"],
        "nonexistent",
    ),
    (
        "data-prepare-empty-dataset",
        ["data", "prepare", "--data", "imagefolder", "--data-root", "{ws}/empty_ds", "--out", "{new}"],
        "empty_ds",
    ),
    (
        "data-prepare-corrupt-images",
        [
            "data",
            "prepare",
            "--data",
            "imagefolder",
            "--data-root",
            "{ws}/corrupt_ds",
            "--img-size",
            "16",
            "--out",
            "{new}",
        ],
        "decoded",
    ),
    (
        "data-prepare-set-wrong-type",
        ["data", "prepare", "--data", "scenes", "--set", "val_size=abc", "--out", "{new}"],
        "val_size",
    ),
    (
        "data-prepare-set-unknown-key",
        ["data", "prepare", "--data", "scenes", "--set", "bogus_key=1", "--out", "{new}"],
        "bogus_key",
    ),
    (
        "data-prepare-conflicting",
        [
            "data",
            "prepare",
            "--data",
            "imagefolder",
            "--data-root",
            "{ws}/good_ds",
            "--img-size",
            "24",
            "--out",
            "{ws}/prepared_ok",
        ],
        "prepared_ok",
    ),
    (
        "data-prepare-into-a-file",
        [
            "data",
            "prepare",
            "--data",
            "imagefolder",
            "--data-root",
            "{ws}/good_ds",
            "--img-size",
            "16",
            "--out",
            "{ws}/user_notes.txt",
        ],
        "user_notes.txt",
    ),
    (
        "data-imagenet100-missing-root",
        [
            "data",
            "imagenet100",
            "--imagenet-root",
            "{ws}/nonexistent",
            "--class-list",
            "{ws}/classes.txt",
            "--out",
            "{new}",
        ],
        "nonexistent",
    ),
    (
        "data-imagenet100-missing-class-list",
        [
            "data",
            "imagenet100",
            "--imagenet-root",
            "{ws}/good_ds",
            "--class-list",
            "{ws}/nonexistent.txt",
            "--out",
            "{new}",
        ],
        "nonexistent.txt",
    ),
    (
        "data-imagenet100-bad-class-list",
        [
            "data",
            "imagenet100",
            "--imagenet-root",
            "{ws}/good_ds",
            "--class-list",
            "{ws}/user_notes.txt",
            "--out",
            "{new}",
        ],
        "user_notes.txt",
    ),
    # import paper
    (
        "import-missing-file",
        ["import", "paper", "{ws}/nonexistent.pt", "--condition", "ape", "--out", "{new}"],
        "nonexistent.pt",
    ),
    (
        "import-missing-file-named",
        ["import", "paper", "{ws}/ape1_imagenet_100_60", "--out", "{new}"],
        "ape1_imagenet_100_60",
    ),
    (
        "import-random-file",
        ["import", "paper", "{ws}/random.bin", "--condition", "ape", "--out", "{new}"],
        "random.bin",
    ),
    (
        "import-safetensors-file",
        ["import", "paper", "{ws}/foreign.safetensors", "--condition", "ape", "--out", "{new}"],
        "layout",
    ),
    (
        "import-truncated-file",
        ["import", "paper", "{ws}/paper_truncated.pt", "--condition", "ape", "--out", "{new}"],
        "paper_truncated.pt",
    ),
    ("import-pickle", ["import", "paper", "{ws}/evil.pt", "--condition", "ape", "--out", "{new}"], "unpickling"),
    (
        "import-into-a-training-run",
        ["import", "paper", "{ws}/paper_ok.pt", "--condition", "ape", "--out", "{ws}/run_ok"],
        "run_ok",
    ),
    pytest.param(
        "import-unknown-condition",
        ["import", "paper", "{ws}/paper_ok.pt", "--condition", "bogus_cond", "--out", "{new}"],
        "bogus_cond",
        id="import-unknown-condition",
    ),
]


# Errors found while reading the data, after the run directory was claimed: the --out may exist,
# holding the run's config.yaml (a rerun with the same config resumes) and nothing else.
MAY_CLAIM_OUT = {"train-corrupt-images", "data-prepare-corrupt-images"}


def _case_id(case: object) -> str:
    return case[0] if isinstance(case, tuple) else str(case)


def fill(argv: list[str], ws: Path, new: Path) -> list[str]:
    return [a.replace("{ws}", str(ws)).replace("{new}", str(new)) for a in argv]


@pytest.mark.parametrize(("name", "argv", "match"), CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_one_clear_line_and_touches_nothing(name, argv, match, ws, new, capsys):
    before = tree_digest(ws)
    code, _, err = run_main(fill(argv, ws, new), capsys)
    assert_one_error_line(code, err, match)
    assert tree_digest(ws) == before, "the command changed files in the user's workspace"
    if name in MAY_CLAIM_OUT and new.exists():
        left = {k for k, v in tree_digest(new).items() if v != "dir"}
        assert left <= {"config.yaml"}, f"a failed command left {sorted(left)} in {new}"
    else:
        assert not new.exists(), f"a refused command created its --out {new}"


DEBUG_CASES = [
    ["train", *SMOKE, "--pe", "bogus_pe", "--out", "{new}"],
    ["analyze", "{ws}/run_truncated", "--out", "{new}"],
    ["reproduce", *SMOKE, "--conditions", "bogus_pe", "--out", "{new}"],
    ["report", "{ws}/bad.json"],
    ["data", "prepare", "--data", "bogus_ds", "--out", "{new}"],
    ["import", "paper", "{ws}/evil.pt", "--condition", "ape", "--out", "{new}"],
]


@pytest.mark.parametrize("argv", DEBUG_CASES, ids=[a[0] for a in DEBUG_CASES])
def test_debug_reraises_for_a_traceback(argv, ws, new, capsys):
    with pytest.raises(PeanchorError):
        main(["--debug", *fill(argv, ws, new)])
    assert not new.exists()


def test_diverging_lr_is_one_line_exit_3_and_nothing_is_finished(ws, tmp_path, capsys):
    out = tmp_path / "nan_run"
    code, _, err = run_main(
        ["train", *SMOKE, "--set", "optim.lr=1e9", "--set", "optim.clip_grad=null", "--out", str(out)], capsys
    )
    line = assert_one_error_line(code, err, "loss became")
    assert code == 3, line
    assert not (out / "model.safetensors").exists() and not (out / "summary.json").exists()
    assert not (out / ".lock").exists(), "the run lock was not released"


def test_a_single_corrupt_image_is_skipped_with_a_warning(ws, tmp_path, capsys):
    """Not an error: the unreadable file is named in a warning and the preparation completes."""
    data = tmp_path / "one_bad"
    shutil.copytree(ws / "good_ds", data)
    (data / "val" / "c0" / "1.jpg").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match="1.jpg"):
        code, _, _ = run_main(
            [
                "data",
                "prepare",
                "--data",
                "imagefolder",
                "--data-root",
                str(data),
                "--img-size",
                "16",
                "--out",
                str(tmp_path / "prep"),
            ],
            capsys,
        )
    assert code == 0


def test_conflicting_reproduce_rerun_leaves_the_finished_grid_alone(tmp_path, capsys):
    out = tmp_path / "grid"
    code, _, _ = run_main(["reproduce", *SMOKE, "--conditions", "none", "--out", str(out)], capsys)
    assert code == 0
    before = tree_digest(out)
    code, _, err = run_main(
        ["reproduce", *SMOKE, "--conditions", "none", "--set", "optim.lr=3e-4", "--out", str(out)], capsys
    )
    assert_one_error_line(code, err, "different config")
    assert tree_digest(out) == before


# ----------------------------------------------------------------------------------------------
# Untrusted checkpoints


def test_load_model_refuses_a_pickle_without_running_it(ws, tmp_path):
    marker = tmp_path / "MARKER"
    torch.save(Evil(marker), tmp_path / "model.safetensors")  # a pickle under a safetensors name
    torch.save(Evil(marker), tmp_path / "evil.pt")
    for path in (tmp_path / "model.safetensors", tmp_path, tmp_path / "evil.pt"):
        with pytest.raises(CheckpointError, match="pickle"):
            load_model(path)
    assert not marker.exists()


def test_analyze_and_import_refuse_a_pickle_without_running_it(ws, new, capsys):
    marker = ws / "MARKER"
    for argv in (
        ["analyze", f"{ws}/run_pickle", "--out", str(new)],
        ["import", "paper", f"{ws}/evil.pt", "--condition", "ape", "--out", str(new)],
        ["import", "paper", f"{ws}/evil.pt", "--condition", "ape", "--out", str(new), "--num-heads", "2"],
    ):
        code, _, err = run_main(argv, capsys)
        assert_one_error_line(code, err, "pickl")
        assert not marker.exists(), f"{argv[0]} ran code from a pickle"


# ----------------------------------------------------------------------------------------------
# The same through real processes: stderr as a user sees it


SUBPROCESS_CASES = [
    (["train", *SMOKE, "--pe", "bogus_pe", "--out", "{new}"], "bogus_pe"),
    (["analyze", "{ws}/run_truncated", "--out", "{new}"], "truncated"),
    (["import", "paper", "{ws}/evil.pt", "--condition", "ape", "--out", "{new}"], "unpickling"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "match"), SUBPROCESS_CASES, ids=[a[0] for a, _ in SUBPROCESS_CASES])
def test_bad_input_in_a_real_process(argv, match, ws, new, cache):
    before = tree_digest(ws)
    proc = subprocess.run(
        [sys.executable, "-m", "peanchor", *fill(argv, ws, new)],
        capture_output=True,
        text=True,
        env=subprocess_env(cache),
        timeout=300,
        check=False,
    )
    assert_one_error_line(proc.returncode, proc.stderr, match)
    assert tree_digest(ws) == before
    assert not new.exists()
    assert not (ws / "MARKER").exists()


@pytest.mark.slow
def test_debug_shows_a_traceback_in_a_real_process(ws, new, cache):
    proc = subprocess.run(
        [sys.executable, "-m", "peanchor", "--debug", "analyze", f"{ws}/run_truncated", "--out", str(new)],
        capture_output=True,
        text=True,
        env=subprocess_env(cache),
        timeout=300,
        check=False,
    )
    assert proc.returncode != 0
    assert "Traceback (most recent call last)" in proc.stderr
    assert "CheckpointError" in proc.stderr


@pytest.mark.slow
def test_all_corrupt_images_in_a_real_process_warn_once_each_then_one_error(ws, new, cache):
    argv = [
        "data",
        "prepare",
        "--data",
        "imagefolder",
        "--data-root",
        f"{ws}/corrupt_ds",
        "--img-size",
        "16",
        "--out",
        str(new),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "peanchor", *argv],
        capture_output=True,
        text=True,
        env=subprocess_env(cache),
        timeout=300,
        check=False,
    )
    warnings = [line for line in proc.stderr.splitlines() if line.startswith("peanchor: warning: ")]
    assert sorted(w.split()[5] for w in warnings) == [f"{ws}/corrupt_ds/train/c0/{i}.jpg" for i in range(3)]
    rest = "".join(line + "\n" for line in proc.stderr.splitlines() if line not in warnings)
    assert_one_error_line(proc.returncode, rest, "decoded")


def test_a_mistyped_command_or_flag_gets_the_closest_and_no_flag_is_abbreviated(capsys):
    for argv, expected in ((["reprodce"], "invalid choice: 'reprodce'"), (["analyze", "RUN", "--rpi-draw", "2"],
                           "unrecognized arguments: --rpi-draw 2; did you mean --rpi-draws?")):  # fmt: skip
        with pytest.raises(SystemExit) as stop:
            main(argv)
        assert stop.value.code == 2
        err = capsys.readouterr().err
        assert expected in err and err.count("\n") == 1, err
    with pytest.raises(SystemExit):
        main(["reprodce"])
    assert "did you mean reproduce?" in capsys.readouterr().err


def test_every_command_that_writes_takes_out_and_old_spellings_still_work():
    import argparse

    from peanchor.cli import build_parser

    def leaves(parser, prefix=""):  # every command that runs, nested ones (data prepare, import paper) included
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            yield prefix.strip(), parser
        for action in subs:
            for name, child in action.choices.items():
                yield from leaves(child, f"{prefix} {name}")

    commands = dict(leaves(build_parser()))
    assert {"train", "analyze", "reproduce", "report", "audit"} <= set(commands)
    for name, parser in commands.items():
        flags = {s for action in parser._actions for s in action.option_strings}
        assert "--out" in flags, name
    report = commands["report"]
    assert report.parse_args(["R", "--report-dir", "D"]).report_dir == "D" == report.parse_args(["R", "--out", "D"]).report_dir
