"""peanchor.metrics.ssdc: per-image SSDC (numpy on the CPU, torch elsewhere) against a scipy ``spearmanr``
loop, with random and tie-rich data, constant and NaN rows, on square and non-square grids."""

from __future__ import annotations

import importlib
import itertools
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats as sps

from peanchor.metrics import SSDCAccumulator, grid_distances, ssdc

fast_module = importlib.import_module("peanchor.metrics._ssdc_fast")  # the fast path behind ssdc()
ranking_module = importlib.import_module("peanchor.metrics._ranking")
spearman_module = importlib.import_module("peanchor.metrics.spearman")

GRIDS = [(3, 4), (1, 7), (5, 2), (4, 4), (6, 9)]


def _scipy_ssdc_of_matrix(sim: np.ndarray, grid: tuple[int, int], metric: str) -> float:
    iu = np.triu_indices(grid[0] * grid[1], k=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sps.ConstantInputWarning)  # a constant row: NaN on both sides
        return float(sps.spearmanr(sim[iu], -grid_distances(grid, metric).numpy()[iu]).statistic)


def _scipy_per_image(tokens: torch.Tensor, grid: tuple[int, int], metric: str = "manhattan") -> np.ndarray:
    """``(B, L)``: what a user would write: normalise, numpy matmul, ``spearmanr`` per image and layer."""
    t = tokens.numpy()
    out = np.empty(t.shape[:2])
    for b, layer in itertools.product(range(t.shape[0]), range(t.shape[1])):
        x = t[b, layer]  # (N, D)
        unit = x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), 1e-12)
        out[b, layer] = _scipy_ssdc_of_matrix(unit @ unit.T, grid, metric)
    return out


def _per_image(tokens: torch.Tensor, grid: tuple[int, int], metric: str = "manhattan") -> np.ndarray:
    """``(B, L)``: the per-image values that SSDCAccumulator(mode="per_image") averages."""
    pairs = fast_module.cosine_pair_blocks(tokens)  # [(B * L, P_i)]
    return fast_module.ssdc_of_pairs(pairs, grid, metric).view(tokens.shape[:2]).numpy()


def _tokens(batch: int, layers: int, grid: tuple[int, int], dim: int, seed: int) -> torch.Tensor:
    """Noise plus a smooth positional part that grows with the layer: SSDC from about 0 to high."""
    g = torch.Generator().manual_seed(seed)
    n = grid[0] * grid[1]
    rows, cols = torch.arange(n) // grid[1], torch.arange(n) % grid[1]
    pos = torch.stack([torch.cos(rows * 0.7 + k) + torch.sin(cols * 0.9 - k) for k in range(dim)], dim=-1)  # (N, D)
    strength = torch.linspace(0.0, 2.0, layers)[:, None, None]  # (L, 1, 1)
    return torch.randn(batch, layers, n, dim, generator=g) + strength * pos  # (B, L, N, D)


def _signed_tokens(batch: int, layers: int, n: int, dim: int, seed: int) -> torch.Tensor:
    """Tokens with four entries +-1 and the rest 0: every norm is 2 and every similarity a multiple of
    1/4, computed exactly by any float arithmetic (so both sides see the same, massive, ties)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.zeros(batch, layers, n, dim)
    idx = torch.rand(batch, layers, n, dim, generator=g).argsort(dim=-1)[..., :4]  # (B, L, N, 4) columns
    signs = torch.randint(0, 2, (batch, layers, n, 4), generator=g) * 2.0 - 1.0
    return x.scatter_(-1, idx, signs)


@pytest.mark.parametrize("grid", GRIDS)
@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_per_image_ssdc_equals_scipy_loop(grid: tuple[int, int], metric: str) -> None:
    # float64 tokens: both sides compute the similarities in float64, so the only differences are
    # float64 roundings. (In float32 the two similarity matmuls round differently and, on a small
    # grid, one swapped near-tie already moves SSDC by ~1e-6; the 14x14 test below covers float32.)
    tokens = _tokens(5, 3, grid, dim=16, seed=sum(grid)).double()
    expected = _scipy_per_image(tokens, grid, metric)  # (B, L)
    np.testing.assert_allclose(_per_image(tokens, grid, metric), expected, atol=1e-9, rtol=0)
    acc = SSDCAccumulator(grid, metric=metric, mode="per_image")
    acc.update(tokens[:2])
    acc.update(tokens[2:])
    np.testing.assert_allclose(acc.compute().numpy(), expected.mean(axis=0), atol=1e-9, rtol=0)


@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_per_image_ssdc_float32_paper_grid_equals_scipy_loop(metric: str) -> None:
    grid = (14, 14)  # 19,110 pairs, ranked in float32 with the payload keys
    tokens = _tokens(2, 3, grid, dim=32, seed=14)
    expected = _scipy_per_image(tokens, grid, metric)
    np.testing.assert_allclose(_per_image(tokens, grid, metric), expected, atol=1e-6, rtol=0)
    acc = SSDCAccumulator(grid, metric=metric, mode="per_image")
    acc.update(tokens)
    np.testing.assert_allclose(acc.compute().numpy(), expected.mean(axis=0), atol=1e-6, rtol=0)


@pytest.mark.parametrize("grid", [(3, 4), (5, 2), (4, 4)])
def test_per_image_ssdc_with_exact_ties_equals_scipy(grid: tuple[int, int]) -> None:
    n = grid[0] * grid[1]
    tokens = _signed_tokens(4, 3, n, dim=6, seed=n)
    tokens[1, 2] = tokens[1, 2, :1]  # one layer of one image: all tokens equal, constant similarity
    expected = _scipy_per_image(tokens, grid)
    assert np.isnan(expected[1, 2]) and np.isfinite(np.delete(expected.ravel(), 5)).all()
    got = _per_image(tokens, grid)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(expected))
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)
    acc = SSDCAccumulator(grid, mode="per_image")
    acc.update(tokens)
    np.testing.assert_allclose(acc.compute().numpy(), np.nanmean(expected, axis=0), atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("grid", [(3, 4), (1, 7), (6, 9)])
def test_ssdc_of_quantised_similarities_equals_scipy(dtype: torch.dtype, grid: tuple[int, int]) -> None:
    n = grid[0] * grid[1]
    g = torch.Generator().manual_seed(n)
    sims = torch.round(torch.randn(4, n, n, generator=g, dtype=torch.float64) * 3) / 4  # few levels: ties
    sims[0] = torch.rand(n, n, generator=g, dtype=torch.float64)  # one row nearly without ties
    sims[1, 0, 1] = -0.0  # a signed zero among the zeros
    sims[2] = 0.25  # constant -> NaN
    sims = sims.to(dtype)
    got = ssdc(sims, grid).numpy()
    expected = np.array([_scipy_ssdc_of_matrix(s.double().numpy(), grid, "manhattan") for s in sims])
    assert np.isnan(got[2]) and np.isnan(expected[2])
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)


def test_ssdc_nan_and_infinite_similarities_follow_scipy() -> None:
    grid = (3, 4)
    g = torch.Generator().manual_seed(0)
    sims = torch.randn(4, 12, 12, generator=g)  # float32
    sims[0, 0, 5] = float("nan")  # NaN among the pairs -> NaN (spearmanr propagates)
    sims[1, 5, 0] = float("nan")  # NaN below the diagonal: not a pair, ignored
    sims[2, 0, 3] = float("inf")
    sims[2, 4, 7] = -float("inf")
    sims[3, 1, 2] = sims[3, 2, 9] = float("inf")  # two infinities tie
    got = ssdc(sims, grid).numpy()
    expected = np.array([_scipy_ssdc_of_matrix(s.numpy(), grid, "manhattan") for s in sims])
    assert np.isnan(got[0]) and np.isfinite(got[1:]).all()
    np.testing.assert_allclose(got, expected, atol=1e-12, rtol=0)


def test_numpy_and_torch_ssdc_agree() -> None:
    """The CPU (numpy) kernel and the torch kernel used on other devices give the same values."""
    grid = (6, 9)
    flat, reference = fast_module._pair_reference(grid, "euclidean", torch.device("cpu"))
    g = torch.Generator().manual_seed(1)
    sims = torch.randn(40, 54, 54, generator=g)  # float32
    sims[::4] = torch.round(sims[::4] * 2) / 2  # tie-rich rows
    sims[1] = 3.0  # constant
    sims[2, 0, 1] = float("nan")
    pairs = sims.reshape(40, -1)[:, flat]  # (M, P)
    torch_values = fast_module._ssdc_rows_torch(pairs, reference).numpy()
    numpy_values = ssdc(sims, grid, "euclidean").numpy()
    np.testing.assert_array_equal(np.isnan(numpy_values), np.isnan(torch_values))
    assert np.isnan(numpy_values[[1, 2]]).all()
    np.testing.assert_allclose(numpy_values, torch_values, atol=1e-12, rtol=0)


@pytest.mark.parametrize("n", [1, 2, 3, 12, 50])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_cosine_pair_blocks_equal_normalise_then_matmul(n: int, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(n)
    x = torch.randn(2, 3, n, 8, generator=g, dtype=dtype)  # (B, L, N, D)
    if n > 2:
        x[0, 1, 2] = 0.0  # a zero token: similarity 0 with everyone, as F.normalize gives
    rows, cols = torch.triu_indices(n, n, offset=1)
    atol = 1e-6 if dtype == torch.float32 else 1e-13
    # 1e25 overflows float32 squared norms and 1e-25 underflows them (normalise-first fallback); in
    # float64 both are ordinary. 1e-300 is below eps (1e-12) in both: F.normalize divides by eps.
    for scale in (1.0, 1e25, 1e-25, 1e-300):
        unit = F.normalize(x * scale, dim=-1, eps=1e-12)
        expected = (unit @ unit.transpose(-1, -2))[..., rows, cols].reshape(6, -1)  # (B * L, P)
        got = torch.cat(fast_module.cosine_pair_blocks(x * scale), dim=-1)
        torch.testing.assert_close(got, expected, atol=atol, rtol=0)
    nan_token = x.clone()
    nan_token[1, 0, 0, 0] = float("nan")
    got = torch.cat(fast_module.cosine_pair_blocks(nan_token), dim=-1)
    assert torch.isnan(got[3, : n - 1]).all() and torch.isfinite(got[torch.arange(6) != 3]).all()


def test_per_image_ssdc_is_the_same_in_any_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    grid = (4, 4)
    tokens = _tokens(7, 3, grid, dim=6, seed=3)
    whole = SSDCAccumulator(grid, mode="per_image")
    whole.update(tokens)
    monkeypatch.setattr(fast_module, "_CPU_SIM_CHUNK_ELEMENTS", 1)  # one image per similarity chunk
    monkeypatch.setattr(fast_module, "_CPU_RANK_CHUNK_ELEMENTS", 1)  # one matrix per ranking chunk
    chunked = SSDCAccumulator(grid, mode="per_image")
    chunked.update(tokens)
    torch.testing.assert_close(chunked.compute(), whole.compute(), atol=0, rtol=0)


def test_torch_kernel_end_to_end_equals_numpy_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The path GPUs take (torch ranking, torch.cat of the pair blocks, its chunk sizes), run on the CPU."""
    grid = (5, 2)
    tokens = _tokens(6, 3, grid, dim=6, seed=5)
    tokens[2, 1] = tokens[2, 1, :1]  # a constant layer: skipped in the mean
    sims = torch.randn(3, 10, 10, generator=torch.Generator().manual_seed(0))
    numpy_values, numpy_matrices = _per_image(tokens, grid), ssdc(sims, grid)
    for module in (fast_module, ranking_module):
        monkeypatch.setattr(module, "uses_numpy", lambda device: False)
    monkeypatch.setattr(fast_module, "_RANK_CHUNK_ELEMENTS", 50)  # several chunks of 45 pairs
    np.testing.assert_allclose(_per_image(tokens, grid), numpy_values, atol=1e-12, rtol=0)
    torch.testing.assert_close(ssdc(sims, grid), numpy_matrices, atol=1e-12, rtol=0)


# ---- edges (found by mutation testing) ------------------------------------------------------------------------------


def test_torch_rows_are_clamped_to_one():
    """For some pair counts the torch path's float64 rounding steps past ±1 (the GPU path); which ones depends on the
    CPU's vector kernels (11 on one machine, 27 on another), so they are looked for. The result is exactly ±1."""

    def unclamped(n: int) -> float:
        x = torch.arange(n, dtype=torch.float64)
        centred = x - x.mean()
        return (centred @ spearman_module._standardised_ranks(x) / torch.linalg.vector_norm(centred)).item()

    past = [n for n in range(3, 200) if unclamped(n) > 1.0][:3]
    assert past, "no pair count whose rounding steps past 1: the case the clamp is for"
    for n in past:
        x = torch.arange(n, dtype=torch.float64)
        reference = spearman_module._standardised_ranks(x)  # (P,)
        assert fast_module._ssdc_rows_torch(torch.stack([x, -x]), reference).tolist() == [1.0, -1.0]


def test_similarity_refusals_to_the_letter():
    with pytest.raises(ValueError, match=r"^similarity must be real, got dtype torch\.complex64$"):
        ssdc(torch.ones(4, 4, dtype=torch.complex64), (2, 2))
    message = r"^similarity has N=5 tokens but the grid has H\*W=4; drop the CLS token and check the grid$"
    with pytest.raises(ValueError, match=message):
        ssdc(torch.ones(2, 3, 5, 5), (2, 2))  # (B, L, N, N): the message names N, not a leading dim


@pytest.mark.filterwarnings("ignore::scipy.stats.ConstantInputWarning")
def test_the_smallest_grids_and_constant_similarity():
    """Three slots in a row are three pairs, correlated as scipy does; two slots are one pair, nothing to
    correlate (NaN); a constant similarity is NaN without a numpy warning."""
    sim = torch.tensor([[1.0, 0.8, 0.1], [0.8, 1.0, 0.5], [0.1, 0.5, 1.0]], dtype=torch.float64)
    d = grid_distances((1, 3)).numpy()
    pairs = [(0, 1), (0, 2), (1, 2)]
    expected = sps.spearmanr([sim[i, j].item() for i, j in pairs], [-d[i, j] for i, j in pairs]).statistic
    assert ssdc(sim, (1, 3)).item() == pytest.approx(expected, abs=1e-12)
    assert torch.isnan(ssdc(torch.eye(2, dtype=torch.float64), (1, 2))).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        assert torch.isnan(ssdc(torch.ones(2, 12, 12, dtype=torch.float64), (3, 4))).all()


@pytest.mark.parametrize(("mode", "bootstrap"), [("mean_similarity", 0), ("mean_similarity", 8), ("per_image", 0),
                                                 ("per_image", 8)])  # fmt: skip
def test_merged_shards_measure_as_one_accumulator(mode, bootstrap):
    """merge (sharded runs): two shards give the whole set's SSDC; with the bootstrap, the merged replicates are the
    sums of the shards' (a Poisson weight per image), and per image the values of both shards are resampled."""
    grid = (3, 3)
    tokens = _tokens(10, 2, grid, dim=6, seed=7)
    whole, first, second = (SSDCAccumulator(grid, mode=mode, bootstrap=bootstrap, seed=s) for s in (0, 0, 1))
    whole.update(tokens)
    first.update(tokens[:4])
    second.update(tokens[4:])
    first.merge(second)
    assert first.num_images == 10
    torch.testing.assert_close(first.compute(), whole.compute(), atol=1e-12, rtol=0)
    if bootstrap:
        low, high = first.confidence_interval()
        assert low.shape == (2,) and bool((low <= high).all())
    with pytest.raises(ValueError, match="merge needs accumulators of the same"):
        first.merge(SSDCAccumulator(grid, mode=mode, bootstrap=bootstrap, metric="euclidean"))
