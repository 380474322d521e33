"""The position probe against a closed-form least-squares solution (numpy), streamed in any batching."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from peanchor.metrics.position_probe import PositionProbeAccumulator, heldout_mask, slot_coordinates

GRID = (3, 4)


def reference_r2(tokens: np.ndarray, heldout: np.ndarray, ridge: float) -> np.ndarray:
    """(L, 2) held-out R²: ridge with an unpenalised intercept, solved as an augmented least-squares problem
    (``np.linalg.lstsq``) on every fit token, and R² computed from the held-out predictions directly."""
    _, layers, n, d = tokens.shape
    y = slot_coordinates(GRID).numpy()  # (N, 2)
    out = np.empty((layers, 2))
    for layer in range(layers):
        fit_x = tokens[~heldout, layer].reshape(-1, d)
        fit_y = np.tile(y, (int((~heldout).sum()), 1))
        mu, ybar = fit_x.mean(axis=0), fit_y.mean(axis=0)
        centred = fit_x - mu
        lam = ridge * np.trace(centred.T @ centred / len(fit_x)) / d  # λ relative to the mean feature variance
        # min (1/m)|Y - XW|² + λ|W|²  ⇔  least squares on [X; sqrt(mλ) I] against [Y; 0]
        a = np.vstack([centred, np.sqrt(len(fit_x) * lam) * np.eye(d)])
        b = np.vstack([fit_y - ybar, np.zeros((d, 2))])
        w = np.linalg.lstsq(a, b, rcond=None)[0]  # (D, 2)
        test_x = tokens[heldout, layer].reshape(-1, d)
        test_y = np.tile(y, (int(heldout.sum()), 1))
        pred = (test_x - mu) @ w + ybar
        out[layer] = 1 - ((test_y - pred) ** 2).sum(axis=0) / ((test_y - test_y.mean(axis=0)) ** 2).sum(axis=0)
    return out


def structured_tokens(b: int, layers: int, d: int, seed: int = 0) -> torch.Tensor:
    """Random tokens with a large offset, some layers carrying a noisy linear code of the slot's (row, col)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(b, layers, GRID[0] * GRID[1], d, generator=g, dtype=torch.float64) + 4.0
    code = slot_coordinates(GRID) @ torch.randn(2, d, generator=g, dtype=torch.float64)  # (N, D)
    for layer in range(layers):
        x[:, layer] += 3 * (layer / max(layers - 1, 1)) * code
    return x  # (B, L, N, D): layer 0 knows nothing, the last layer a lot


@pytest.mark.parametrize("ridge", [1e-3, 0.3])
def test_probe_equals_closed_form_least_squares(ridge):
    tokens = structured_tokens(30, 3, 6)
    heldout = heldout_mask(30, 0.4, seed=2)
    acc = PositionProbeAccumulator(GRID, ridge=ridge)
    for start, stop in ((0, 7), (7, 8), (8, 30)):  # uneven batches, one of a single image
        acc.update(tokens[start:stop], heldout[start:stop])
    expected = reference_r2(tokens.numpy(), heldout.numpy(), ridge)
    np.testing.assert_allclose(acc.compute().numpy(), expected, rtol=0, atol=1e-10)
    assert acc.num_images == (18, 12)
    assert expected[0].max() < 0.1 < 0.9 < expected[-1].min()  # the test data spans no structure to a lot


def test_float32_tokens_agree_with_float64():
    tokens = structured_tokens(24, 2, 8, seed=1)
    heldout = heldout_mask(24, seed=0)
    r2 = []
    for dtype in (torch.float64, torch.float32):
        acc = PositionProbeAccumulator(GRID)
        acc.update(tokens.to(dtype), heldout)
        r2.append(acc.compute())
    torch.testing.assert_close(r2[1], r2[0], rtol=0, atol=1e-5)  # the mean shift keeps float32 sums accurate


def test_heldout_split_is_fixed_by_its_seed():
    a, b = heldout_mask(100, 0.25, seed=7), heldout_mask(100, 0.25, seed=7)
    assert torch.equal(a, b) and int(a.sum()) == 25
    assert not torch.equal(a, heldout_mask(100, 0.25, seed=8))
    assert int(heldout_mask(2, 0.01).sum()) == 1 and int(heldout_mask(2, 0.99).sum()) == 1


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="at least 2 images"):
        heldout_mask(1)
    with pytest.raises(ValueError, match="fraction"):
        heldout_mask(10, 1.0)
    with pytest.raises(ValueError, match="ridge"):
        PositionProbeAccumulator(GRID, ridge=0.0)
    acc = PositionProbeAccumulator(GRID)
    acc.update(structured_tokens(3, 1, 4), torch.zeros(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="fit and held-out"):
        acc.compute()  # every image went to the fit split
    with pytest.raises(ValueError, match="do not match"):
        acc.update(structured_tokens(3, 2, 4), torch.ones(3, dtype=torch.bool))


# ---- edges and refusals, to the letter (found by mutation testing) ------------------------------------------------


def test_slot_coordinates_and_split_defaults():
    assert slot_coordinates((2, 3)).tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    assert torch.equal(heldout_mask(10), heldout_mask(10, 0.5, seed=0))  # the defaults: half, seed 0
    assert int(heldout_mask(10, 0.01).sum()) == 1 and int(heldout_mask(10, 0.99).sum()) == 9  # at least 1, at most n-1
    for bad in (0.0, 1.0):
        with pytest.raises(ValueError, match=rf"^the held-out fraction must be in \(0, 1\), got {bad!r}$"):
            heldout_mask(10, bad)


def test_settings_are_checked_to_the_letter():
    for grid in ((0, 2), (True, 2), (2.0, 2)):
        with pytest.raises(ValueError, match=r"^grid must be a pair \(H, W\) of positive ints, got "):
            PositionProbeAccumulator(grid)
    for ridge in (0, -1.0, True, "1"):
        with pytest.raises(ValueError, match=rf"^ridge must be a number > 0, got {ridge!r}$"):
            PositionProbeAccumulator(GRID, ridge)
    acc = PositionProbeAccumulator(GRID)
    split = torch.tensor([False, True])
    for tokens in (torch.ones(2, 12, 8), torch.ones(2, 1, 12, 8, dtype=torch.int64), [[1.0]]):
        with pytest.raises(ValueError, match=r"^tokens must be a floating-point tensor \(B, L, N, D\)$"):
            acc.update(tokens, split)
    with pytest.raises(ValueError, match=r"^tokens have N=6 but the grid 3x4 has 12 positions$"):
        acc.update(torch.ones(2, 1, 6, 8), split)
    with pytest.raises(ValueError, match=r"^heldout must be a bool tensor \(B,\) = \(2,\), got \(3,\)$"):
        acc.update(torch.ones(2, 1, 12, 8), torch.tensor([False, True, True]))
    acc.update(torch.randn(2, 3, 12, 8), split)
    with pytest.raises(ValueError, match=r"^tokens \(L=2, D=8, cpu\) do not match earlier batches \(L=3, D=8, cpu\)$"):
        acc.update(torch.randn(2, 2, 12, 8), split)


def test_a_split_given_as_integers_is_the_same_split():
    tokens = structured_tokens(6, 2, 8)
    as_bool, as_int = PositionProbeAccumulator(GRID), PositionProbeAccumulator(GRID)
    split = [False, True, False, True, True, False]
    as_bool.update(tokens, torch.tensor(split))
    as_int.update(tokens, [int(s) for s in split])
    assert as_int.num_images == (3, 3)
    torch.testing.assert_close(as_int.compute(), as_bool.compute(), rtol=0, atol=0)


def test_a_first_batch_of_one_image_and_low_precision_tokens():
    """The first batch may hold a single image; bfloat16 tokens are read as float32 (the same numbers as their
    float32 copy), not multiplied in bfloat16."""
    tokens = structured_tokens(6, 2, 8).to(torch.bfloat16)
    split = torch.tensor([False, True, False, True, True, False])
    low, single = PositionProbeAccumulator(GRID), PositionProbeAccumulator(GRID)
    for k in range(6):
        single.update(tokens[k : k + 1].float(), split[k : k + 1])
    low.update(tokens, split)
    whole = PositionProbeAccumulator(GRID)
    whole.update(tokens.float(), split)
    torch.testing.assert_close(low.compute(), whole.compute(), rtol=0, atol=0)
    torch.testing.assert_close(single.compute(), whole.compute(), rtol=0, atol=1e-6)


def test_perfect_and_undefined_scores():
    """Tokens that are a linear code of the slot give R² = 1 to the last digit (no floor on the error); a grid of one
    row has no row spread to score (NaN), while its columns are scored even when their spread is below 1."""
    code = torch.randn(2, 8, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    tokens = (slot_coordinates(GRID) @ code).expand(4, 1, 12, 8).clone()  # (B, L, N, D)
    acc = PositionProbeAccumulator(GRID, ridge=1e-12)
    acc.update(tokens, torch.tensor([False, True, False, True]))
    torch.testing.assert_close(acc.compute(), torch.ones(1, 2, dtype=torch.float64), rtol=0, atol=1e-9)
    one_row = PositionProbeAccumulator((1, 2), ridge=1e-12)
    one_row.update(torch.tensor([[[[0.0, 1.0], [1.0, 0.0]]]] * 3, dtype=torch.float64), torch.tensor([False, False, True]))
    r2 = one_row.compute()  # held out: one image of 2 slots, column spread 0.5
    assert torch.isnan(r2[0, 0]) and r2[0, 1].item() == pytest.approx(1.0, abs=1e-9)


def test_sums_stay_on_the_tokens_device():
    """Streaming works on any device (here ``meta``, which refuses to mix with CPU tensors)."""
    acc = PositionProbeAccumulator(GRID)
    acc.update(torch.empty(4, 2, 12, 8, device="meta"), torch.tensor([False, True, False, True]))
    assert acc.num_images == (2, 2)


def test_merged_shards_score_as_one_accumulator():
    """merge (sharded runs): two shards of a set, each shifted by its own first image, merge into the accumulator of
    the whole set, to float rounding."""
    tokens = structured_tokens(12, 2, 8, seed=3)
    heldout = torch.tensor([i % 3 == 0 for i in range(12)])
    whole, first, second = (PositionProbeAccumulator(GRID) for _ in range(3))
    whole.update(tokens, heldout)
    first.update(tokens[:5], heldout[:5])
    second.update(tokens[5:] + 0.0, heldout[5:])
    first.merge(second)
    assert first.num_images == whole.num_images
    np.testing.assert_allclose(first.compute().numpy(), whole.compute().numpy(), rtol=0, atol=1e-9)
    empty = PositionProbeAccumulator(GRID)
    empty.merge(whole)
    np.testing.assert_allclose(empty.compute().numpy(), whole.compute().numpy(), rtol=0, atol=0)
    whole.reset()
    with pytest.raises(ValueError, match="needs fit and held-out images"):
        whole.compute()
