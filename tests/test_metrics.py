"""peanchor.metrics: spearman/rankdata and ssdc against scipy, SSDCAccumulator against brute force,
robustness helpers."""

from __future__ import annotations

import importlib
import itertools
import math
import warnings

import numpy as np
import pytest
import torch
from scipy import stats as sps

from peanchor.metrics import (
    SSDCAccumulator,
    accuracy,
    fragility_score,
    grid_distances,
    rankdata,
    spearman,
    ssdc,
)
from peanchor.metrics._ssdc_fast import _pair_reference

# ---------------------------------------------------------------------------------------- helpers


def _inputs(kind: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "float":
        return torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "tied":  # integer-valued with few levels: many ties
        return torch.randint(0, 4, shape, generator=g).to(torch.float64)
    if kind == "int":
        return torch.randint(-3, 3, shape, generator=g)
    raise AssertionError(kind)


def _brute_distances(grid: tuple[int, int], metric: str) -> np.ndarray:
    h, w = grid
    n = h * w
    d = np.zeros((n, n))
    for i, j in itertools.product(range(n), repeat=2):
        dr, dc = i // w - j // w, i % w - j % w
        d[i, j] = abs(dr) + abs(dc) if metric == "manhattan" else math.hypot(dr, dc)
    return d


def _scipy_ssdc(sim: np.ndarray, grid: tuple[int, int], metric: str = "manhattan") -> float:
    d = _brute_distances(grid, metric)
    n = d.shape[0]
    s_pairs = [sim[i, j] for i in range(n) for j in range(i + 1, n)]
    d_pairs = [-d[i, j] for i in range(n) for j in range(i + 1, n)]
    return float(sps.spearmanr(s_pairs, d_pairs).statistic)


def _cosine(tokens: np.ndarray) -> np.ndarray:
    """(N, D) -> (N, N) cosine similarity, float64."""
    unit = tokens / np.linalg.norm(tokens, axis=-1, keepdims=True)
    return unit @ unit.T


def _batches(total: int, sizes: list[int]) -> list[slice]:
    assert sum(sizes) == total
    bounds = np.cumsum([0, *sizes])
    return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


GRID = (3, 4)  # deliberately not square: catches row/column mix-ups
N = GRID[0] * GRID[1]


def _tokens(num_images: int, num_layers: int = 3, dim: int = 6, seed: int = 0) -> torch.Tensor:
    """Tokens with some spatial structure (a smooth positional part + noise), (B, L, N, D)."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.arange(N) // GRID[1]
    cols = torch.arange(N) % GRID[1]
    pos = torch.stack([torch.cos(rows * 0.7 + k) + torch.sin(cols * 0.9 - k) for k in range(dim)], dim=-1)  # (N, D)
    strength = torch.linspace(0.2, 2.0, num_layers)[:, None, None]  # (L, 1, 1)
    noise = torch.randn(num_images, num_layers, N, dim, generator=g)
    return noise + strength * pos  # (B, L, N, D)


# ------------------------------------------------------------------------------ rankdata/spearman


@pytest.mark.parametrize("kind", ["float", "tied", "int"])
@pytest.mark.parametrize("shape", [(7,), (5, 30), (2, 3, 50)])
def test_rankdata_matches_scipy(kind: str, shape: tuple[int, ...]) -> None:
    x = _inputs(kind, shape, seed=len(shape))
    expected = sps.rankdata(x.numpy(), method="average", axis=-1)
    got = rankdata(x)
    assert got.dtype == torch.float64 and got.shape == x.shape
    np.testing.assert_array_equal(got.numpy(), expected)


def test_rankdata_large_int64_ties_are_exact() -> None:
    big = 2**60
    x = torch.tensor([big + 1, big, big + 1, big + 2])  # not distinguishable in float64
    np.testing.assert_array_equal(rankdata(x).numpy(), [2.5, 1.0, 2.5, 4.0])


def test_rankdata_chunked_rows_match_scipy(monkeypatch: pytest.MonkeyPatch) -> None:
    # The package re-exports the function under the module's name, so fetch the module itself.
    sp = importlib.import_module("peanchor.metrics._ranking")
    monkeypatch.setattr(sp, "_CHUNK_ELEMENTS", 64)  # force many row chunks (torch path)
    monkeypatch.setattr(sp, "_CPU_CHUNK_ELEMENTS", 64)  # and on the CPU (numpy) path
    x = _inputs("tied", (37, 20), seed=3)
    np.testing.assert_array_equal(rankdata(x).numpy(), sps.rankdata(x.numpy(), axis=-1))


@pytest.mark.parametrize("kind", ["float", "tied"])
def test_spearman_matches_scipy_rowwise(kind: str) -> None:
    x = _inputs(kind, (4, 3, 40), seed=1)
    y = _inputs(kind, (4, 3, 40), seed=2)
    got = spearman(x, y)
    assert got.shape == (4, 3) and got.dtype == torch.float64
    for idx in itertools.product(range(4), range(3)):
        expected = sps.spearmanr(x[idx].numpy(), y[idx].numpy()).statistic
        assert got[idx].item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("kind", ["float", "tied"])
def test_spearman_broadcasts_fixed_target(kind: str) -> None:
    x = _inputs(kind, (2, 5, 60), seed=4)
    y = _inputs(kind, (60,), seed=5)
    got = spearman(x, y)
    assert got.shape == (2, 5)
    for b, layer in itertools.product(range(2), range(5)):
        expected = sps.spearmanr(x[b, layer].numpy(), y.numpy()).statistic
        assert got[b, layer].item() == pytest.approx(expected, abs=1e-12)
    torch.testing.assert_close(spearman(y, x), got)  # symmetric


def test_spearman_dtypes_and_degenerate_inputs() -> None:
    x = torch.randn(3, 10)
    assert spearman(x, x).dtype == torch.float32
    torch.testing.assert_close(spearman(x, x), torch.ones(3))
    torch.testing.assert_close(spearman(x, -x), -torch.ones(3))
    assert spearman(x, x.double()).dtype == torch.float64
    assert spearman(x.to(torch.bfloat16), x.to(torch.bfloat16)).dtype == torch.float32
    assert spearman(torch.arange(5), torch.arange(5)).dtype == torch.float64
    assert torch.isnan(spearman(torch.ones(6), torch.arange(6.0)))  # constant input, as scipy
    with pytest.raises(ValueError, match="last dimensions"):
        spearman(torch.zeros(3, 4), torch.zeros(5))
    with pytest.raises(ValueError, match="broadcast"):
        spearman(torch.zeros(3, 4), torch.zeros(2, 4))


# ------------------------------------------------------------------------------------------- ssdc


@pytest.mark.parametrize("grid", [(2, 3), (3, 2), (4, 4), (1, 5)])
@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_grid_distances_row_major(grid: tuple[int, int], metric: str) -> None:
    got = grid_distances(grid, metric)
    assert got.dtype == torch.float64 and got.shape == (grid[0] * grid[1],) * 2
    np.testing.assert_allclose(got.numpy(), _brute_distances(grid, metric), atol=1e-12)


@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_ssdc_matches_scipy_on_upper_triangle(metric: str) -> None:
    g = torch.Generator().manual_seed(0)
    sims = torch.randn(2, 3, N, N, generator=g, dtype=torch.float64)  # not symmetric: only i<j counts
    sims[0, 0] = torch.round(sims[0, 0])  # heavily tied similarity values too
    got = ssdc(sims, GRID, metric)
    assert got.shape == (2, 3) and got.dtype == torch.float64
    for b, layer in itertools.product(range(2), range(3)):
        expected = _scipy_ssdc(sims[b, layer].numpy(), GRID, metric)
        assert got[b, layer].item() == pytest.approx(expected, abs=1e-12)


@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
@pytest.mark.parametrize("grid", [(3, 4), (14, 14)])
def test_ssdc_of_negative_distance_is_one(metric: str, grid: tuple[int, int]) -> None:
    d = grid_distances(grid, metric)
    assert ssdc(-d, grid, metric).item() == pytest.approx(1.0, abs=1e-12)
    assert ssdc(d, grid, metric).item() == pytest.approx(-1.0, abs=1e-12)
    assert ssdc(-d.float(), grid, metric).item() == pytest.approx(1.0, abs=1e-12)


def test_ssdc_paper_grid_pair_count() -> None:
    flat, reference = _pair_reference((14, 14), "manhattan", torch.device("cpu"))
    assert flat.numel() == 19110 == reference.numel()


def test_ssdc_invariant_under_monotone_transforms() -> None:
    g = torch.Generator().manual_seed(1)
    s = torch.rand(4, N, N, generator=g, dtype=torch.float64) * 2 - 1
    base = ssdc(s, GRID)
    for transformed in (torch.exp(3 * s), s**3 + s, 5 * s - 2, torch.atan(10 * s), torch.sigmoid(s)):
        torch.testing.assert_close(ssdc(transformed, GRID), base, atol=1e-12, rtol=0)
    torch.testing.assert_close(ssdc(-s, GRID), -base, atol=1e-12, rtol=0)


def test_ssdc_reads_upper_triangle_only_and_constant_is_nan() -> None:
    g = torch.Generator().manual_seed(2)
    s = torch.randn(N, N, generator=g, dtype=torch.float64)
    lower_changed = s.clone()
    lower_changed.tril_(-1).add_(torch.randn(N, N, generator=g, dtype=torch.float64).tril(-1))
    lower_changed += s.triu()
    assert ssdc(lower_changed, GRID).item() == pytest.approx(ssdc(s, GRID).item(), abs=1e-15)
    assert torch.isnan(ssdc(torch.ones(N, N), GRID))


def test_ssdc_chunking_and_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    ssdc_module = importlib.import_module("peanchor.metrics._ssdc_fast")
    g = torch.Generator().manual_seed(3)
    s = torch.randn(7, 2, N, N, generator=g)
    full = ssdc(s, GRID)
    monkeypatch.setattr(ssdc_module, "_RANK_CHUNK_ELEMENTS", 100)  # 1 row (66 pairs) per chunk
    monkeypatch.setattr(ssdc_module, "_CPU_RANK_CHUNK_ELEMENTS", 100)  # the same on the CPU (numpy) path
    torch.testing.assert_close(ssdc(s, GRID), full, atol=1e-14, rtol=0)
    hits = _pair_reference.cache_info().hits
    ssdc(s, GRID)
    assert _pair_reference.cache_info().hits == hits + 1


def test_ssdc_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="H\\*W"):
        ssdc(torch.zeros(N + 1, N + 1), GRID)
    with pytest.raises(ValueError, match=r"\(\.\.\., N, N\)"):
        ssdc(torch.zeros(N, N - 1), GRID)
    with pytest.raises(ValueError, match="metric"):
        ssdc(torch.zeros(N, N), GRID, "chebyshev")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="grid"):
        ssdc(torch.zeros(N, N), (0, N))
    with pytest.raises(ValueError, match="grid"):
        grid_distances((3,))  # type: ignore[arg-type]


# ----------------------------------------------------------------------------------- accumulator


def _brute_mean_similarity_ssdc(tokens: torch.Tensor, metric: str = "manhattan") -> np.ndarray:
    t = tokens.double().numpy()  # (B, L, N, D)
    out = []
    for layer in range(t.shape[1]):
        mean_sim = np.mean([_cosine(t[b, layer]) for b in range(t.shape[0])], axis=0)
        out.append(_scipy_ssdc(mean_sim, GRID, metric))
    return np.array(out)


def _brute_per_image_ssdc(tokens: torch.Tensor) -> np.ndarray:
    t = tokens.double().numpy()
    per_image = np.array(
        [[_scipy_ssdc(_cosine(t[b, layer]), GRID) for layer in range(t.shape[1])] for b in range(t.shape[0])]
    )  # (B, L)
    return per_image


@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_accumulator_mean_similarity_matches_brute_force(metric: str) -> None:
    tokens = _tokens(11)
    acc = SSDCAccumulator(GRID, metric=metric)
    for sl in _batches(11, [3, 1, 5, 2]):
        acc.update(tokens[sl])
    got = acc.compute()
    assert acc.num_images == 11 and got.shape == (3,) and got.dtype == torch.float64 and got.device.type == "cpu"
    np.testing.assert_allclose(got.numpy(), _brute_mean_similarity_ssdc(tokens, metric), atol=1e-6)


def test_accumulator_float64_tokens_are_exact_and_scale_invariant() -> None:
    tokens = _tokens(6).double()
    acc = SSDCAccumulator(GRID)
    acc.update(tokens[:4] * 7.0)  # normalisation removes the token scale
    acc.update(tokens[4:])
    np.testing.assert_allclose(acc.compute().numpy(), _brute_mean_similarity_ssdc(tokens), atol=1e-12)


def test_accumulator_per_image_matches_scipy_loop() -> None:
    tokens = _tokens(9, seed=1)
    acc = SSDCAccumulator(GRID, mode="per_image")
    for sl in _batches(9, [4, 4, 1]):
        acc.update(tokens[sl])
    expected = _brute_per_image_ssdc(tokens).mean(axis=0)
    np.testing.assert_allclose(acc.compute().numpy(), expected, atol=1e-6)


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_accumulator_per_image_skips_undefined_images() -> None:
    tokens = _tokens(4, seed=2)
    constant = tokens[:1].clone()
    constant[:, 0] = 1.0  # layer 0 of this image: all tokens equal -> constant similarity
    acc = SSDCAccumulator(GRID, mode="per_image")
    acc.update(torch.cat([tokens, constant]))
    per_image = _brute_per_image_ssdc(tokens)  # (4, L) for the well-defined images
    expected = np.concatenate([per_image, _brute_per_image_ssdc(constant)]).astype(float)
    expected[-1, 0] = np.nan
    np.testing.assert_allclose(acc.compute().numpy(), np.nanmean(expected, axis=0), atol=1e-6)


def test_accumulator_bootstrap_matches_brute_force_poisson_weights() -> None:
    tokens = _tokens(12, seed=3)
    reps = 50
    acc = SSDCAccumulator(GRID, bootstrap=reps, seed=7)
    for sl in _batches(12, [5, 7]):
        acc.update(tokens[sl])
    low, high = acc.confidence_interval(0.9)

    weights = torch.poisson(torch.ones(12, reps), generator=torch.Generator().manual_seed(7)).numpy()  # (B, R)
    t = tokens.double().numpy()
    replicates = np.empty((reps, t.shape[1]))
    for layer in range(t.shape[1]):
        sims = [_cosine(t[b, layer]) for b in range(12)]
        for r in range(reps):
            weighted = sum(weights[b, r] * sims[b] for b in range(12))
            replicates[r, layer] = _scipy_ssdc(weighted, GRID) if weights[:, r].sum() > 0 else np.nan
    expected_low, expected_high = np.nanquantile(replicates, [0.05, 0.95], axis=0)
    np.testing.assert_allclose(low.numpy(), expected_low, atol=1e-5)
    np.testing.assert_allclose(high.numpy(), expected_high, atol=1e-5)


@pytest.mark.parametrize("mode", ["mean_similarity", "per_image"])
def test_accumulator_bootstrap_ci_contains_estimate_and_is_deterministic(mode: str) -> None:
    tokens = _tokens(24, seed=4)

    def run(seed: int, sizes: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        acc = SSDCAccumulator(GRID, mode=mode, bootstrap=100, seed=seed)  # type: ignore[arg-type]
        for sl in _batches(24, sizes):
            acc.update(tokens[sl])
        low, high = acc.confidence_interval()
        return acc.compute(), low, high

    estimate, low, high = run(0, [24])
    assert low.shape == high.shape == (3,) and low.dtype == torch.float64
    assert torch.all(low <= estimate) and torch.all(estimate <= high) and torch.all(low < high)
    # Same seed -> same interval, whatever the batch split; another seed -> another interval.
    _, low2, high2 = run(0, [7, 1, 10, 6])
    torch.testing.assert_close((low2, high2), (low, high), atol=1e-6, rtol=0)
    _, low3, _ = run(1, [24])
    assert not torch.allclose(low3, low)


def test_accumulator_per_image_bootstrap_matches_resampling_reference() -> None:
    tokens = _tokens(10, seed=5)
    acc = SSDCAccumulator(GRID, mode="per_image", bootstrap=40, seed=3)
    acc.update(tokens[:6])
    acc.update(tokens[6:])
    values = _brute_per_image_ssdc(tokens)  # (B, L)
    draws = torch.randint(10, (40, 10), generator=torch.Generator().manual_seed(3)).numpy()
    means = np.stack([values[row].mean(axis=0) for row in draws])  # (R, L)
    low, high = acc.confidence_interval(0.8)
    np.testing.assert_allclose(low.numpy(), np.quantile(means, 0.1, axis=0), atol=1e-6)
    np.testing.assert_allclose(high.numpy(), np.quantile(means, 0.9, axis=0), atol=1e-6)


def test_accumulator_half_precision_tokens() -> None:
    tokens = _tokens(5).to(torch.bfloat16)
    for dtype in (torch.bfloat16, torch.float16):
        half, upcast = SSDCAccumulator(GRID), SSDCAccumulator(GRID)
        half.update(tokens.to(dtype))
        upcast.update(tokens.to(dtype).float())
        torch.testing.assert_close(half.compute(), upcast.compute(), atol=0, rtol=0)


def test_accumulator_memory_does_not_grow_with_images() -> None:
    for mode in ("mean_similarity", "per_image"):
        reps = 4 if mode == "mean_similarity" else 0  # per_image + bootstrap stores values: allowed to grow
        acc = SSDCAccumulator(GRID, mode=mode, bootstrap=reps)  # type: ignore[arg-type]
        sizes = []
        for step in range(5):
            acc.update(_tokens(3, seed=step))
            sizes.append(sum(v.numel() for v in vars(acc).values() if isinstance(v, torch.Tensor)))
        assert len(set(sizes)) == 1, mode
        assert not any(isinstance(v, list) for v in vars(acc).values())


def test_accumulator_reset_and_empty_batch() -> None:
    tokens = _tokens(6)
    acc = SSDCAccumulator(GRID, bootstrap=10)
    acc.update(tokens)
    first, first_ci = acc.compute(), acc.confidence_interval()
    acc.reset()
    assert acc.num_images == 0
    acc.update(tokens[:0])  # an empty batch is a no-op
    assert acc.num_images == 0
    acc.update(tokens)
    torch.testing.assert_close(acc.compute(), first, atol=0, rtol=0)
    torch.testing.assert_close(acc.confidence_interval(), first_ci, atol=0, rtol=0)


def test_accumulator_errors() -> None:
    acc = SSDCAccumulator(GRID)
    with pytest.raises(ValueError, match="update"):
        acc.compute()
    with pytest.raises(ValueError, match="bootstrap"):
        acc.confidence_interval()
    with pytest.raises(ValueError, match=r"\(B, L, N, D\)"):
        acc.update(torch.zeros(2, N, 4))
    with pytest.raises(ValueError, match="N=13"):
        acc.update(torch.zeros(2, 3, N + 1, 4))  # e.g. CLS not dropped
    with pytest.raises(ValueError, match="floating"):
        acc.update(torch.zeros(2, 3, N, 4, dtype=torch.int64))
    acc.update(_tokens(2))
    with pytest.raises(ValueError, match="L=2"):
        acc.update(_tokens(2, num_layers=2))
    with pytest.raises(ValueError, match="level"):
        SSDCAccumulator(GRID, bootstrap=5).confidence_interval(1.5)
    for kwargs in ({"mode": "median"}, {"metric": "cosine"}, {"bootstrap": -1}, {"bootstrap": 2.5}):
        with pytest.raises(ValueError):
            SSDCAccumulator(GRID, **kwargs)  # type: ignore[arg-type]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("mode", ["mean_similarity", "per_image"])
def test_accumulator_cuda_matches_cpu(mode: str) -> None:
    tokens = _tokens(16)
    cpu = SSDCAccumulator(GRID, mode=mode, bootstrap=20)  # type: ignore[arg-type]
    gpu = SSDCAccumulator(GRID, mode=mode, bootstrap=20)  # type: ignore[arg-type]
    cpu.update(tokens)
    gpu.update(tokens.cuda().to(torch.bfloat16))
    assert gpu.compute().device.type == "cpu"
    cpu_bf16 = SSDCAccumulator(GRID, mode=mode, bootstrap=20)  # type: ignore[arg-type]
    cpu_bf16.update(tokens.to(torch.bfloat16))
    torch.testing.assert_close(gpu.compute(), cpu_bf16.compute(), atol=1e-5, rtol=0)
    torch.testing.assert_close(gpu.confidence_interval(), cpu_bf16.confidence_interval(), atol=1e-4, rtol=0)
    with pytest.raises(ValueError, match="on cpu"):
        gpu.update(tokens)
    assert torch.allclose(gpu.compute(), cpu.compute(), atol=0.05)


# ------------------------------------------------------------------------------------ robustness


def test_fragility_score() -> None:
    assert fragility_score(0.64, 0.32) == pytest.approx(0.5)
    assert fragility_score(0.5, 0.6) == pytest.approx(-0.2)
    assert math.isnan(fragility_score(0.0, 0.1))
    got = fragility_score(torch.tensor([0.8, 0.0, 0.5]), torch.tensor([0.2, 0.0, 0.5]))
    assert torch.allclose(got[[0, 2]], torch.tensor([0.75, 0.0])) and torch.isnan(got[1])
    arr = fragility_score(np.array([[0.8], [0.0]]), np.array([0.4, 0.2]))  # broadcasting
    assert arr.shape == (2, 2) and np.allclose(arr[0], [0.5, 0.75]) and np.isnan(arr[1]).all()
    assert np.allclose(fragility_score([0.5, 0.25], [0.25, 0.25]), [0.5, 0.0])


def test_accuracy() -> None:
    logits = torch.tensor([[0.1, 0.9, 0.0], [2.0, 0.0, 1.0], [0.0, 0.0, 5.0], [1.0, 3.0, 2.0]])
    assert accuracy(logits, torch.tensor([1, 0, 2, 0])) == 0.75
    assert math.isnan(accuracy(torch.zeros(0, 3), torch.zeros(0, dtype=torch.long)))
    with pytest.raises(ValueError):
        accuracy(logits, torch.tensor([1, 0]))
    with pytest.raises(ValueError):
        accuracy(logits[0], torch.tensor(1))


@pytest.mark.parametrize("kind", ["float", "numpy", "torch"])
def test_fragility_score_is_float64_arithmetic_whatever_the_types(kind) -> None:
    """Mixed inputs (a number with an array, either way round) take the array's path; values are computed in
    float64 (0.1 is not exact in float32), integer tensors give float64, float32 tensors stay float32; a clean
    accuracy of exactly 1 is a number like any other, 0 gives NaN without a warning."""
    clean, shift = [0.1, 1.0, 0.0], [0.03, 0.25, 0.1]
    expected = np.array([1 - 0.03 / 0.1, 0.75, np.nan])
    wrap = {"float": list, "numpy": lambda v: np.array(v, dtype=np.float32), "torch": torch.tensor}[kind]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero or invalid-value warning from the NaN case
        for a, b in ((wrap(clean), shift), (clean, wrap(shift)), (wrap(clean), wrap(shift))):
            got = fragility_score(a, b)
            if kind == "torch":
                assert isinstance(got, torch.Tensor) and got.dtype == torch.float32
                got = got.double().numpy()
                np.testing.assert_allclose(got, expected, rtol=1e-6)
            else:
                assert isinstance(got, np.ndarray) and got.dtype == np.float64
                np.testing.assert_allclose(got, expected, rtol=0 if kind == "float" else 1e-6)
            assert np.isnan(got[2])
    f64 = {"dtype": torch.float64}
    for a, b in ((torch.tensor([0.1, 1.0], **f64), [0.03, 0.25]), ([0.1, 1.0], torch.tensor([0.03, 0.25], **f64))):
        got = fragility_score(a, b)
        assert got.dtype == torch.float64 and got.tolist() == [1 - 0.03 / 0.1, 0.75]  # float64 to the last bit
    ints = fragility_score(torch.tensor([4, 2]), torch.tensor([1, 2]))  # correct counts
    assert ints.dtype == torch.float64 and ints.tolist() == [0.75, 0.0]
    assert fragility_score(0.5, np.array([0.25, 0.5])).tolist() == [0.5, 0.0]
    assert fragility_score(torch.tensor([0.5, 1.0]), 0.25).tolist() == [0.5, 0.75]


def test_fragility_score_converts_each_side_to_float64_without_warnings() -> None:
    """Each side is read as float64 on its own (an exact fraction on one side does not make an object array), and
    both 0/0 and x/0 give NaN quietly."""
    from fractions import Fraction

    for clean, shift in (([Fraction(1, 2)], [0.25]), ([0.5], [Fraction(1, 4)])):
        got = fragility_score(clean, shift)
        assert got.dtype == np.float64 and got.tolist() == [0.5]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.isnan(fragility_score(np.zeros(2), np.array([0.0, 0.1]))).all()


def test_fragility_score_keeps_the_tensors_device() -> None:
    meta = torch.empty(2, device="meta")
    assert fragility_score(meta, [0.5, 0.25]).device.type == "meta"
    assert fragility_score([0.5, 0.25], meta).device.type == "meta"


def test_accuracy_refusals_say_what_was_given() -> None:
    logits = torch.zeros(4, 3)
    with pytest.raises(ValueError, match=r"^labels must have shape \(4,\) to match logits, got \(2,\)$"):
        accuracy(logits, torch.tensor([1, 0]))
    with pytest.raises(ValueError, match=r"^logits must have shape \(B, C\), got \(3,\)$"):
        accuracy(logits[0], torch.tensor(1))


# ------------------------------------------------------------------ SSDC streaming edges (found by mutation testing)


def test_bootstrap_streamed_one_image_at_a_time_matches_brute_force() -> None:
    """Three images fed one by one: the point estimate is the SSDC of the summed similarities, and the interval is
    the brute-force Poisson bootstrap, where a replicate whose images all drew weight 0 is undefined, and one whose
    weights sum to 1 is a single image's SSDC like any other."""
    tokens, reps = _tokens(3, seed=8), 200
    acc = SSDCAccumulator(GRID, bootstrap=reps, seed=3)
    for k in range(3):
        acc.update(tokens[k : k + 1])
    weights = torch.poisson(torch.ones(3, reps), generator=torch.Generator().manual_seed(3)).numpy()  # (B, R)
    assert (weights.sum(axis=0) == 1).any() and (weights[-1] == 0).any()  # both cases occur
    t = tokens.double().numpy()
    replicates = np.full((reps, t.shape[1]), np.nan)
    for layer in range(t.shape[1]):
        sims = [_cosine(t[b, layer]) for b in range(3)]
        np.testing.assert_allclose(acc.compute()[layer].item(), _scipy_ssdc(sum(sims), GRID), atol=1e-6)
        for r in range(reps):
            if weights[:, r].sum() > 0:
                replicates[r, layer] = _scipy_ssdc(sum(weights[b, r] * sims[b] for b in range(3)), GRID)
    low, high = acc.confidence_interval(0.8)
    expected_low, expected_high = np.nanquantile(replicates, [0.1, 0.9], axis=0)
    np.testing.assert_allclose(low.numpy(), expected_low, atol=1e-5)
    np.testing.assert_allclose(high.numpy(), expected_high, atol=1e-5)


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_per_image_bootstrap_streamed_is_the_resampled_mean_of_defined_images() -> None:
    """Per-image SSDC fed one image at a time (the store grows many times) gives the interval of resampling the
    images with replacement (the seeded draws) and averaging the defined values; an undefined image counts as a
    draw but not as a value."""
    tokens = _tokens(9, seed=9)
    tokens[4, 0] = 1.0  # image 4, layer 0: constant tokens, SSDC undefined
    reps = 300
    acc = SSDCAccumulator(GRID, mode="per_image", bootstrap=reps, seed=5)
    for k in range(9):
        acc.update(tokens[k : k + 1])
    values = _brute_per_image_ssdc(tokens).astype(float)  # (9, L)
    values[4, 0] = np.nan
    draws = torch.randint(9, (reps, 9), generator=torch.Generator().manual_seed(5)).numpy()  # (R, n)
    replicates = np.nanmean(values[draws], axis=1)  # (R, L)
    low, high = acc.confidence_interval(0.9)
    np.testing.assert_allclose(low.numpy(), np.nanquantile(replicates, 0.05, axis=0), atol=1e-6)
    np.testing.assert_allclose(high.numpy(), np.nanquantile(replicates, 0.95, axis=0), atol=1e-6)
    np.testing.assert_allclose(acc.compute().numpy(), np.nanmean(values, axis=0), atol=1e-6)


def test_confidence_interval_refusals_to_the_letter() -> None:
    with pytest.raises(ValueError, match=r"^confidence_interval\(\) needs SSDCAccumulator\(\.\.\., bootstrap=R\) "
                                         r"with R > 0$"):  # fmt: skip
        SSDCAccumulator(GRID).confidence_interval()
    acc = SSDCAccumulator(GRID, bootstrap=10)
    for level in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^level must be in \(0, 1\), got {level!r}$"):
            acc.confidence_interval(level)
    with pytest.raises(ValueError, match=r"^SSDCAccumulator\.confidence_interval\(\) needs at least one image; "
                                         r"call update\(\) first$"):  # fmt: skip
        acc.confidence_interval()


def test_bootstrap_uses_the_accumulators_metric() -> None:
    tokens = _tokens(10, seed=10)
    for metric in ("manhattan", "euclidean"):
        acc = SSDCAccumulator(GRID, metric=metric, bootstrap=40, seed=1)
        acc.update(tokens)
        weights = torch.poisson(torch.ones(10, 40), generator=torch.Generator().manual_seed(1)).numpy()
        t = tokens.double().numpy()
        sims = [_cosine(t[b, 0]) for b in range(10)]
        reps = [_scipy_ssdc(sum(weights[b, r] * sims[b] for b in range(10)), GRID, metric) for r in range(40)]
        np.testing.assert_allclose(acc.confidence_interval(0.5)[0][0].item(), np.quantile(reps, 0.25), atol=1e-5)


def test_bootstrap_of_float64_tokens_matches_float32() -> None:
    """The Poisson weights take the tokens' dtype: float64 tokens stream as well as float32 ones, to float32
    rounding."""
    tokens = _tokens(6, seed=11)
    acc32, acc64 = SSDCAccumulator(GRID, bootstrap=30, seed=2), SSDCAccumulator(GRID, bootstrap=30, seed=2)
    acc32.update(tokens.float())
    acc64.update(tokens.double())
    for a, b in zip(acc64.confidence_interval(), acc32.confidence_interval()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-5)


def test_per_image_bootstrap_draws_exactly_the_replicates_asked_for() -> None:
    """Many images and replicates: the resampling runs in chunks of replicates, and the chunks add up to R."""
    acc = SSDCAccumulator(GRID, mode="per_image", bootstrap=10_000, seed=0)
    acc.update(_tokens(600, num_layers=1, seed=12))
    assert acc._replicates().shape == (10_000, 1)


def test_grid_and_metric_refusals_to_the_letter() -> None:
    from peanchor.metrics.grid import check_grid, check_metric

    for grid in ((True, 2), (2, True), (0, 2), (2, 0), (2.5, 2), (2, -1)):
        with pytest.raises(ValueError, match=r"^grid must be"):
            check_grid(grid)
    assert check_grid((1, 1)) == (1, 1)
    with pytest.raises(ValueError, match=r"^metric must be one of \('manhattan', 'euclidean'\), got 'taxicab'$"):
        check_metric("taxicab")
    assert torch.equal(grid_distances(GRID), grid_distances(GRID, "manhattan"))  # the default


def test_accumulator_settings_are_refused_to_the_letter() -> None:
    with pytest.raises(ValueError, match=r"^mode must be one of \('mean_similarity', 'per_image'\), got 'mean'$"):
        SSDCAccumulator(GRID, mode="mean")
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match=rf"^bootstrap must be a non-negative int \(number of replicates\), "
                                             rf"got {bad!r}$"):  # fmt: skip
            SSDCAccumulator(GRID, bootstrap=bad)
    for bad in ("1", 1.0, True):
        with pytest.raises(ValueError, match=rf"^seed must be an int, got {bad!r}$"):
            SSDCAccumulator(GRID, seed=bad)
    tokens = _tokens(8, seed=13)
    default, seeded = SSDCAccumulator(GRID, bootstrap=50), SSDCAccumulator(GRID, bootstrap=50, seed=0)
    default.update(tokens)
    seeded.update(tokens)
    for a, b in zip(default.confidence_interval(), seeded.confidence_interval()):
        assert torch.equal(a, b)  # the default seed is 0


def test_accumulator_update_refusals_to_the_letter() -> None:
    acc = SSDCAccumulator(GRID)
    cases = [
        ([[1.0]], r"^tokens must have shape \(B, L, N, D\), got list$"),
        (torch.ones(2, 12, 4), r"^tokens must have shape \(B, L, N, D\), got \(2, 12, 4\)$"),
        (torch.ones(2, 1, 6, 4), r"^tokens have N=6 but the grid 3x4 has 12 positions; drop the CLS token and check the grid$"),
        (torch.ones(2, 0, 12, 4), r"^tokens must have L >= 1 layers and D >= 1 channels, got \(2, 0, 12, 4\)$"),
        (torch.ones(2, 1, 12, 0), r"^tokens must have L >= 1 layers and D >= 1 channels, got \(2, 1, 12, 0\)$"),
    ]
    for tokens, message in cases:
        with pytest.raises(ValueError, match=message):
            acc.update(tokens)
    acc.update(torch.randn(2, 1, 12, 1))  # one channel is enough
    with pytest.raises(ValueError, match=r"^tokens are on meta but this accumulator's state is on cpu$"):
        acc.update(torch.empty(2, 1, 12, 4, device="meta"))
    with pytest.raises(ValueError, match=r"^SSDCAccumulator\.compute\(\) needs at least one image; call update\(\) first$"):
        SSDCAccumulator(GRID).compute()
