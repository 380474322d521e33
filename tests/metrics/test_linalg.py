"""The dense linear algebra that runs inside analysis workers (peanchor.metrics.linalg), against scipy and numpy,
with the thread counts the workers use.

The case behind it: torch 2.14.1's batched LU (``torch.linalg.solve`` on a stack) with oneMKL and two threads fails
on two well-conditioned 384 × 384 systems (the probe's normal equations of the paper's model, saved in
tests/data/probe_normal_equations_2x384.safetensors as ``A`` and ``B``): MKL reports "Parameter 6 was incorrect on
entry to DLASWP", then it raises or never returns. Thread counts are set in subprocesses (the suite runs on one
thread), each with a timeout, so a solver that hangs fails the test instead of the suite.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.linalg
import torch

from peanchor.metrics.linalg import SOLVERS, solve_spd

from tests.helpers.paths import TEST_DATA

CASE = TEST_DATA / "probe_normal_equations_2x384.safetensors"


def _spd(batch: int, d: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 4 * d, d, generator=g, dtype=torch.float64)
    a = x.mT @ x / (4 * d) + 1e-3 * torch.eye(d, dtype=torch.float64)
    return a, torch.randn(batch, d, 2, generator=g, dtype=torch.float64)


def test_it_agrees_with_scipys_positive_definite_solve():
    a, b = _spd(3, 40)
    x, how = solve_spd(a, b)
    assert how == "cholesky"
    for i in range(3):
        expected = scipy.linalg.solve(a[i].numpy(), b[i].numpy(), assume_a="pos")
        np.testing.assert_allclose(x[i].numpy(), expected, rtol=0, atol=1e-12)


def test_a_matrix_that_is_not_positive_definite_falls_back_to_lu_one_at_a_time():
    a, b = _spd(2, 6)
    a[1] = torch.diag(torch.tensor([1.0, -2.0, 3.0, 4.0, 5.0, 6.0], dtype=torch.float64))  # symmetric, indefinite
    x, how = solve_spd(a, b)
    assert how == "lu per matrix"
    np.testing.assert_allclose(x.numpy(), np.linalg.solve(a.numpy(), b.numpy()), rtol=0, atol=1e-12)


def test_a_singular_matrix_falls_back_to_least_squares():
    a = torch.zeros(1, 3, 3, dtype=torch.float64)
    a[0, 0, 0] = 2.0  # rank 1
    b = torch.tensor([[[4.0], [0.0], [0.0]]], dtype=torch.float64)
    x, how = solve_spd(a, b)
    assert how == "lstsq per matrix" == SOLVERS[-1]
    np.testing.assert_allclose(x[0].numpy(), np.linalg.lstsq(a[0].numpy(), b[0].numpy(), rcond=None)[0], atol=1e-12)


def test_shapes_that_do_not_pair_are_refused():
    with pytest.raises(ValueError, match="solve_spd needs"):
        solve_spd(torch.eye(3)[None], torch.ones(1, 4, 1))


# Run in a fresh process with each of the given thread counts in turn (the first is the process's own, as a worker
# starts with it); prints one JSON line: thread count → result.
_SHARED_CASE = """
import json, sys, torch, scipy.linalg, numpy as np
from safetensors.torch import load_file
from peanchor.metrics.linalg import solve_spd
t = load_file(sys.argv[2])
results = {}
for threads in map(int, sys.argv[1].split(",")):
    torch.set_num_threads(threads)
    x, how = solve_spd(t["A"], t["B"])
    err = max(float(np.abs(x[i].numpy() - scipy.linalg.solve(t["A"][i].numpy(), t["B"][i].numpy(),
                                                             assume_a="pos")).max())
              for i in range(t["A"].shape[0]))
    results[threads] = {"how": how, "err": err, "threads": torch.get_num_threads()}
print(json.dumps(results))
"""

# The probe and the effective rank at the paper's sizes (12 layers, 196 tokens, D = 384), in a process with the given
# threads: the probe's R² against the same sums solved by scipy, the effective rank against numpy's SVD per matrix.
_PAPER_SIZES = """
import json, sys, torch, numpy as np, scipy.linalg
import peanchor.metrics.position_probe as probe
from peanchor.lenses.effective_rank import effective_rank
torch.set_num_threads(int(sys.argv[1]))
g = torch.Generator().manual_seed(0)
layers, n, d = 12, 196, 384
base = torch.randn(n, d, generator=g)
tokens = base + 0.1 * torch.randn(6, layers, n, d, generator=g)  # (B, L, N, D): a shared layout plus noise
acc = probe.PositionProbeAccumulator((14, 14))
acc.update(tokens, torch.tensor([False, True] * 3))
ours = acc.compute()
how = acc.solver
probe.solve_spd = lambda a, b: (torch.from_numpy(np.stack([scipy.linalg.solve(m.numpy(), r.numpy(), assume_a="pos")
                                                        for m, r in zip(a, b)])), "scipy")
reference = acc.compute()
er = effective_rank(tokens.to(torch.float64))  # (B, L)
er_ref = np.array([[np.exp(-np.sum((p := s / s.sum()) * np.log(p)))
                    for s in (np.linalg.svd(tokens[i, j].double().numpy(), compute_uv=False) for j in range(layers))]
                   for i in range(tokens.shape[0])])
print(json.dumps({"how": how, "r2_err": float((ours - reference).abs().max()), "r2_min": float(ours.min()),
                  "er_err": float(np.abs(er.numpy() - er_ref).max()), "threads": torch.get_num_threads()}))
"""


def _in_process(code: str, threads: int | str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, str(threads), *args], capture_output=True, text=True,
                         timeout=240, check=True)  # fmt: skip
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_probe_case_that_broke_batched_lu_solves_like_scipy():
    """The saved case solved in one fresh process at 2 threads (the count it failed at, as the process starts),
    then at 1: one interpreter start for both."""
    solved = _in_process(_SHARED_CASE, "2,1", str(CASE))
    for threads in (1, 2):
        got = solved[str(threads)]
        assert got["threads"] == threads and got["how"] == "cholesky"
        assert got["err"] < 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("threads", [1, 2])
def test_probe_and_effective_rank_at_the_papers_sizes_agree_with_scipy_and_numpy(threads):
    got = _in_process(_PAPER_SIZES, threads)
    assert got["threads"] == threads and got["how"] == "cholesky"
    assert got["r2_err"] < 1e-9 and got["r2_min"] > 0.5  # a shared layout: every layer gives position away
    assert got["er_err"] < 1e-9


@pytest.mark.slow
def test_the_paper_models_probe_in_a_supervised_worker(tmp_path, capsys):
    """The paper preset's model (12 blocks, D = 384, 196 tokens at 224 px) trained for one epoch and analysed by
    `peanchor reproduce` as a user runs it: in a supervised worker with the threads it is given (2 on CI), where the
    probe's batched LU solve used to fail. The probe is measured, with no failure and no fallback."""
    from PIL import Image

    from peanchor.cli import main
    from peanchor.results.records import read_analysis

    rng = np.random.default_rng(0)
    for split, n in (("train", 2), ("val", 3)):
        for c in range(4):
            folder = tmp_path / "photos" / split / f"class{c}"
            folder.mkdir(parents=True)
            for i in range(n):
                pixels = rng.integers(0, 256, (224, 224, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    prepared = tmp_path / "prepared"
    assert main(["data", "prepare", "--data", "imagefolder", "--data-root", str(tmp_path / "photos"),
                 "--img-size", "224", "--out", str(prepared)]) == 0  # fmt: skip
    out = tmp_path / "out"
    code = main(["reproduce", "--preset", "paper", "--data", "prepared", "--data-root", str(prepared),
                 "--conditions", "ape", "--seeds", "1", "--out", str(out), "--no-progress", "--jobs", "1",
                 "--set", "train.epochs=1", "--set", "train.batch_size=8", "--set", "analysis.batch_size=6",
                 "--set", "analysis.rpi_draws=1", "--set", "analysis.severities=false",
                 "--set", "analysis.alphas=[1.0]"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 0, err
    analysis = read_analysis(out / "runs" / "ape-s0" / "analysis")
    assert analysis.lens_failures == {} and not analysis.notes, err
    probe = analysis.lens("position_probe")
    assert len(probe.row.normal) == 12 and all(math.isfinite(v) for v in probe.row.normal + probe.col.rpi)
    assert analysis.model.grid == [14, 14]
