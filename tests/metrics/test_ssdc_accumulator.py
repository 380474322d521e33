"""peanchor.metrics.ssdc: ``ssdc`` against scipy on the upper triangle, ``SSDCAccumulator`` (mean-similarity and per-image
modes, the bootstrap) against brute force, and their refusals to the letter."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
import torch
from scipy import stats as sps

from peanchor.metrics import SSDCAccumulator, grid_distances, ssdc
from peanchor.metrics._ssdc_fast import _pair_reference

from tests.helpers.grids import GRID, brute_distances as _brute_distances


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
