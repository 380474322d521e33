"""peanchor.metrics.spearman: the numpy (CPU) ranking against scipy.stats.rankdata and against the torch
ranking, with ties, signed zeros, infinities and NaN."""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
import torch
from scipy import stats as sps

from peanchor.metrics import rankdata, spearman

sp = importlib.import_module("peanchor.metrics._ranking")  # the fast ranking behind rankdata and spearman


def _scipy_ranks(x: torch.Tensor) -> np.ndarray:
    """scipy's average ranks row by row (default nan_policy="propagate": a row with a NaN is all NaN)."""
    values = x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    return sps.rankdata(values, method="average", axis=-1)


def _tie_rich(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Few distinct levels, negative and positive, with -0.0 and +0.0 both present (floats)."""
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) < 0.5
    levels = torch.randint(-4, 5, shape, generator=g)  # (..., P) in -4..4: many ties
    if not dtype.is_floating_point:
        return levels.to(dtype) if dtype != torch.uint8 else (levels + 4).to(dtype)
    x = (levels.to(torch.float64) * 0.375).to(dtype)  # exact in every float dtype
    signs = torch.rand(shape, generator=g) < 0.5
    return torch.where((levels == 0) & signs, torch.tensor(-0.0, dtype=dtype), x)  # mix -0.0 into the zeros


FLOATS = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
INTEGERS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.bool]


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS)
def test_cpu_ranks_equal_scipy_with_ties_and_signed_zeros(dtype: torch.dtype) -> None:
    x = _tie_rich((6, 257), dtype, seed=1)
    got = rankdata(x)
    assert got.dtype == torch.float64 and got.shape == x.shape
    np.testing.assert_array_equal(got.numpy(), _scipy_ranks(x))


def test_signed_zeros_tie() -> None:
    x = torch.tensor([[0.0, -0.0, -0.0, 1.0, -1.0]])
    for values in (x, x.double()):  # float32: payload keys; float64: argsort
        np.testing.assert_array_equal(rankdata(values).numpy(), [[3.0, 3.0, 3.0, 5.0, 1.0]])


def test_infinities_are_ordinary_values() -> None:
    inf = float("inf")
    x = torch.tensor([[inf, 1.0, -inf, inf, -inf, 0.0], [2.0, 1.0, 3.0, 0.5, 0.25, 4.0]])
    for values in (x, x.double()):
        np.testing.assert_array_equal(rankdata(values).numpy(), _scipy_ranks(x))


def test_payload_keys_keep_the_order_of_neighbouring_float32_values() -> None:
    # Neighbours one float32 step apart, across binade edges, subnormals and the extremes; with the
    # largest payload written into the low bits, the order must still be the value order.
    f32 = np.float32
    finfo = np.finfo(f32)
    edges = [-finfo.max, f32(-2.0), f32(-1.0), f32(-finfo.smallest_subnormal), f32(0.0), finfo.smallest_subnormal]
    edges += [finfo.tiny, f32(0.5), f32(1.0), f32(2.0), finfo.max]
    with np.errstate(over="ignore"):  # the neighbours of +-max beyond it are +-inf: dropped
        steps = [[np.nextafter(e, -np.inf), e, np.nextafter(e, np.inf)] for e in edges]
    values = np.unique(np.concatenate(steps))
    values = values[np.isfinite(values)].astype(f32)  # (P,) strictly increasing
    shuffled = values[np.random.default_rng(0).permutation(values.size)][None]  # (1, P)
    payload = np.full(values.size, sp._PAYLOAD_MASK, dtype=np.int64)  # every low bit set
    result = sp.sort_rows_with_payload(shuffled, payload)
    assert not result.tied.any() and not result.nan.any()
    np.testing.assert_array_equal(rankdata(torch.from_numpy(shuffled)).numpy(), sps.rankdata(shuffled, axis=-1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_nan_rows_are_nan_like_scipy(dtype: torch.dtype) -> None:
    """Decision: a row with a NaN (of either sign) is NaN throughout, on every device: scipy's default
    ``nan_policy="propagate"``. Other rows are unaffected."""
    nan = float("nan")
    x = torch.tensor(
        [[1.0, nan, 2.0, 2.0], [3.0, 1.0, 2.0, 2.0], [-nan, float("inf"), 0.0, -0.0], [nan, nan, nan, nan]]
    ).to(dtype)
    expected = _scipy_ranks(x)
    assert np.isnan(expected[[0, 2, 3]]).all() and not np.isnan(expected[1]).any()
    np.testing.assert_array_equal(rankdata(x).numpy(), expected)  # numpy (CPU)
    np.testing.assert_array_equal(sp._rank_rows_torch(x).numpy(), expected)  # torch, as on a GPU
    assert torch.isnan(spearman(x[0], torch.arange(4.0)))
    assert spearman(x[1], torch.arange(4.0)).item() == pytest.approx(
        sps.spearmanr(x[1].float().numpy(), np.arange(4.0)).statistic, abs=1e-6
    )


@pytest.mark.parametrize("dtype", FLOATS + INTEGERS)
def test_numpy_and_torch_rankings_agree(dtype: torch.dtype) -> None:
    x = _tie_rich((9, 123), dtype, seed=2)
    np.testing.assert_array_equal(sp.rank_rows(x).numpy(), sp._rank_rows_torch(x).numpy())


def test_float32_payload_path_equals_argsort_path_on_random_and_tied_rows() -> None:
    g = torch.Generator().manual_seed(3)
    rows = torch.randn(20, 4000, generator=g)  # (M, P) float32, a few natural collisions
    rows[::3] = torch.round(rows[::3] * 8) / 8  # every third row: many exact ties
    fast = sp._rank_rows_numpy(rows.numpy())  # payload keys
    slow = sp._rank_rows_numpy(rows.numpy().astype(np.float64))  # argsort of the same values
    np.testing.assert_array_equal(fast, slow)
    np.testing.assert_array_equal(fast, sps.rankdata(rows.numpy(), axis=-1))


def test_sort_rows_accepts_column_blocks() -> None:
    x = _tie_rich((4, 50), torch.float32, seed=4).numpy()
    payload = np.arange(50, dtype=np.int64)
    whole = sp.sort_rows_with_payload(x, payload)
    blocks = sp.sort_rows_with_payload([x[:, :7], x[:, 7:30], x[:, 30:]], payload)
    np.testing.assert_array_equal(whole.tied, blocks.tied)
    np.testing.assert_array_equal(np.sort(whole.payload), np.sort(blocks.payload))
    x[2, 11] = np.nan  # the slow path (a non-finite value) joins the blocks as well
    with_nan = sp.sort_rows_with_payload([x[:, :7], x[:, 7:30], x[:, 30:]], payload)
    assert with_nan.nan.tolist() == [False, False, True, False]
    np.testing.assert_array_equal(with_nan.tied[[0, 1, 3]], whole.tied[[0, 1, 3]])


def test_tie_runs_never_join_rows() -> None:
    tied = np.array([[False, True, True], [True, False, True], [True, True, True]])  # (M, P-1), P = 4
    runs = sp.tie_runs(tied)
    assert runs.first.tolist() == [1, 4, 6, 8]  # flat positions row * 4 + k
    assert runs.length.tolist() == [3, 2, 2, 4]
    assert runs.members.tolist() == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
    assert runs.average.tolist() == [2.0, 2.0, 2.0, 4.5, 4.5, 6.5, 6.5, 9.5, 9.5, 9.5, 9.5]
    empty = sp.tie_runs(np.zeros((3, 0), dtype=bool))  # rows of one element
    assert empty.first.size == empty.members.size == 0


def test_cpu_ranking_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    x = _tie_rich((37, 40), torch.float32, seed=5)
    monkeypatch.setattr(sp, "_CPU_CHUNK_ELEMENTS", 100)  # 2 rows per chunk
    np.testing.assert_array_equal(rankdata(x).numpy(), _scipy_ranks(x))


# ---- edges (found by mutation testing) ------------------------------------------------------------------------------


def test_rounding_past_one_is_clamped():
    """With 27 values the float64 dot product of a unit vector with itself rounds to 1 + 2⁻⁵², and with its negation
    to −1 − 2⁻⁵²: the result is clamped to exactly ±1."""
    z = importlib.import_module("peanchor.metrics.spearman")._standardised_ranks(torch.arange(27, dtype=torch.float64))
    assert (z * z).sum().item() > 1.0 and (z * -z).sum().item() < -1.0  # the case the clamp is for
    x = torch.arange(27, dtype=torch.float64)
    assert spearman(x, x).item() == 1.0 and spearman(x, -x).item() == -1.0


def test_result_dtype_is_float64_if_either_input_is():
    a, b = torch.rand(5, generator=torch.Generator().manual_seed(0)), torch.rand(5, dtype=torch.float64)
    assert spearman(a, b).dtype == torch.float64 and spearman(b, a).dtype == torch.float64
    assert spearman(a, a).dtype == torch.float32 and spearman(torch.arange(5), a).dtype == torch.float32
    assert spearman(torch.arange(5), torch.arange(5)).dtype == torch.float64


def test_a_nan_row_leaves_the_other_rows_alone():
    x = torch.tensor([[1.0, 3.0, 2.0, 4.0], [1.0, float("nan"), 2.0, 3.0]], dtype=torch.float64)
    y = torch.tensor([1.0, 2.0, 3.0, 4.0])
    rho = spearman(x, y)
    assert rho[0].item() == pytest.approx(sps.spearmanr(x[0], y).statistic, abs=1e-12) and torch.isnan(rho[1])


def test_refusals_to_the_letter():
    with pytest.raises(ValueError, match=r"^rankdata needs a real tensor, got dtype torch\.complex64$"):
        rankdata(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(ValueError, match=r"^rankdata needs at least one dimension, got a 0-d tensor$"):
        rankdata(torch.tensor(1.0))
    for x, y in ((torch.ones(3), torch.tensor(1.0)), (torch.tensor(1.0), torch.ones(3))):
        with pytest.raises(ValueError, match=r"^spearman needs tensors with at least one dimension \(\.\.\., P\)$"):
            spearman(x, y)


@pytest.mark.parametrize("numpy_path", [True, False], ids=["numpy", "torch"])
def test_ranking_in_chunks_and_of_empty_inputs(numpy_path, monkeypatch):
    """Rows ranked a few at a time (tiny chunks) give scipy's ranks; an input with no rows or no columns gives an
    empty float64 result of its shape."""
    monkeypatch.setattr(sp, "uses_numpy", lambda device: numpy_path)
    monkeypatch.setattr(sp, "_CHUNK_ELEMENTS", 13)
    monkeypatch.setattr(sp, "_CPU_CHUNK_ELEMENTS", 13)
    x = torch.randint(0, 4, (7, 6), generator=torch.Generator().manual_seed(0)).double()  # ties in every row
    np.testing.assert_array_equal(rankdata(x).numpy(), sps.rankdata(x.numpy(), axis=-1))
    for shape in ((0, 3), (2, 0)):
        ranks = rankdata(torch.ones(shape))
        assert ranks.shape == shape and ranks.dtype == torch.float64


def _inputs(kind: str, shape: tuple[int, ...], seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if kind == "float":
        return torch.randn(shape, generator=g, dtype=torch.float64)
    if kind == "tied":  # integer-valued with few levels: many ties
        return torch.randint(0, 4, shape, generator=g).to(torch.float64)
    if kind == "int":
        return torch.randint(-3, 3, shape, generator=g)
    raise AssertionError(kind)


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
