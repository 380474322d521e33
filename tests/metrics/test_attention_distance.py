"""Mean attention distance and prefix mass against a brute-force loop over heads, queries and keys."""

from __future__ import annotations

import math

import pytest
import torch

from peanchor.metrics.attention_distance import (
    AttentionDistanceAccumulator,
    attention_distance,
    prefix_mass,
    uniform_attention_distance,
)

GRID = (3, 4)


def random_weights(b: int, h: int, prefix: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    t = prefix + GRID[0] * GRID[1]
    logits = 3 * torch.randn(b, h, t, t, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    return logits.softmax(dim=-1)  # (B, H, T, T)


def position(slot: int) -> tuple[int, int]:
    return divmod(slot, GRID[1])


def distance(a: int, b: int, metric: str) -> float:
    (ra, ca), (rb, cb) = position(a), position(b)
    return abs(ra - rb) + abs(ca - cb) if metric == "manhattan" else math.hypot(ra - rb, ca - cb)


def loop_reference(weights: torch.Tensor, prefix: int, metric: str) -> tuple[list[list[float]], list[list[float]]]:
    """Per image and head: the mean over query patches of sum_j A_ij d_ij / sum_j A_ij (patch keys j), and the
    mean over query patches of the weight on the prefix keys, with plain Python loops."""
    n = GRID[0] * GRID[1]
    w = weights.tolist()
    dist, mass = [], []
    for image in w:
        dist.append([])
        mass.append([])
        for head in image:
            per_query, on_prefix = [], []
            for i in range(n):
                row = head[prefix + i]
                patch_weight = sum(row[prefix + j] for j in range(n))
                per_query.append(sum(row[prefix + j] * distance(i, j, metric) for j in range(n)) / patch_weight)
                on_prefix.append(sum(row[k] for k in range(prefix)))
            dist[-1].append(sum(per_query) / n)
            mass[-1].append(sum(on_prefix) / n)
    return dist, mass


@pytest.mark.parametrize("prefix", [0, 1, 3])
@pytest.mark.parametrize("metric", ["manhattan", "euclidean"])
def test_attention_distance_equals_a_brute_force_loop(prefix, metric):
    weights = random_weights(2, 3, prefix, seed=prefix)
    dist, mass = loop_reference(weights, prefix, metric)
    torch.testing.assert_close(attention_distance(weights, GRID, prefix, metric), torch.tensor(dist, dtype=torch.float64),
                               rtol=0, atol=1e-12)  # fmt: skip
    if prefix:
        torch.testing.assert_close(prefix_mass(weights, prefix), torch.tensor(mass, dtype=torch.float64), rtol=0, atol=1e-12)


def test_accumulator_is_the_mean_over_images_and_queries_per_layer_and_head():
    """Two layers, three batches of different sizes: every (image, query) counts once, whatever the batching."""
    batches = [[random_weights(b, 2, 1, seed=10 * layer + k) for k, b in enumerate((3, 1, 4))] for layer in range(2)]
    acc = AttentionDistanceAccumulator(GRID, num_prefix=1)
    for k in range(3):
        for layer in range(2):
            acc(layer, batches[layer][k])  # an AttentionSink: called per block during each pass
    out = acc.compute()
    for layer in range(2):
        weights = torch.cat(batches[layer])  # (8, 2, T, T)
        for metric in ("manhattan", "euclidean"):
            per_image, mass = loop_reference(weights, 1, metric)
            expected = torch.tensor(per_image, dtype=torch.float64).mean(dim=0)  # equal queries per image
            torch.testing.assert_close(out[metric][layer], expected, rtol=0, atol=1e-12)
        torch.testing.assert_close(out["prefix_mass"][layer], torch.tensor(mass, dtype=torch.float64).mean(dim=0),
                                   rtol=0, atol=1e-12)  # fmt: skip


def test_uniform_and_self_attention_bound_the_distance():
    n = GRID[0] * GRID[1]
    even = torch.full((2, n + 1, n + 1), 1 / (n + 1))  # (H, T, T): even over CLS and every patch
    for metric in ("manhattan", "euclidean"):
        uniform = uniform_attention_distance(GRID, metric)
        assert attention_distance(even, GRID, 1, metric).tolist() == pytest.approx([uniform] * 2)
    self_only = torch.eye(n).expand(1, n, n)
    assert attention_distance(self_only, GRID, 0).tolist() == [0.0]
    assert prefix_mass(even).tolist() == pytest.approx([1 / (n + 1)] * 2)


def test_float32_weights_match_float64():
    w = random_weights(2, 2, 1, seed=3)
    torch.testing.assert_close(attention_distance(w.float(), GRID), attention_distance(w, GRID).float(), rtol=1e-6, atol=1e-6)


def test_bad_input_is_a_clear_value_error():
    with pytest.raises(ValueError, match="num_prefix"):
        attention_distance(random_weights(1, 1, 1), GRID, num_prefix=2)
    with pytest.raises(ValueError, match=r"\(\.\.\., T, T\)"):
        attention_distance(torch.ones(13, 12), GRID)
    acc = AttentionDistanceAccumulator(GRID)
    with pytest.raises(ValueError, match="at least one"):
        acc.compute()
    acc.update(1, random_weights(1, 2, 1))
    with pytest.raises(ValueError, match="expected 0..0"):
        acc.compute()  # layer 0 never fed
    with pytest.raises(ValueError, match="heads"):
        acc.update(1, random_weights(1, 3, 1))


# ---- what the functions accept and refuse, to the letter (found by mutation testing) ------------------------------


def test_uniform_distance_defaults_to_manhattan():
    pairs = [(a, b) for a in range(12) for b in range(12)]
    brute = sum(distance(a, b, "manhattan") for a, b in pairs) / len(pairs)
    assert uniform_attention_distance(GRID) == pytest.approx(brute, abs=1e-12)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        (torch.eye(13), r"^attention weights must have shape \(\.\.\., T, T\), got \(13, 13\)$"),  # two dims
        ([[1.0]], r"^attention weights must have shape \(\.\.\., T, T\), got list$"),
        (torch.ones(2, 13, 12), r"^attention weights must have shape \(\.\.\., T, T\), got \(2, 13, 12\)$"),
        (torch.ones(1, 3, 6, 6), r"^attention weights have T=6 tokens but the grid has 12 patches and num_prefix=1; "
                                 r"expected T = num_prefix \+ H\*W$"),  # fmt: skip
    ],
)
def test_bad_weights_are_refused_with_their_shape(weights, message):
    with pytest.raises(ValueError, match=message):
        attention_distance(weights, GRID)
    with pytest.raises(ValueError, match=message):
        AttentionDistanceAccumulator(GRID).update(0, weights)


def test_prefix_mass_refuses_what_it_cannot_read_and_accepts_no_prefix():
    message = r"^prefix_mass needs weights \(\.\.\., T, T\) and 0 <= num_prefix < T, got num_prefix=1$"
    for bad in (torch.full((3, 3), 1 / 3), [[1.0]]):
        with pytest.raises(ValueError, match=message):
            prefix_mass(bad)
    w = torch.full((2, 3, 3), 1 / 3)
    with pytest.raises(ValueError, match="got num_prefix=3$"):
        prefix_mass(w, num_prefix=3)
    assert prefix_mass(w, num_prefix=0).tolist() == [0.0, 0.0]  # no prefix: no mass on it
    assert prefix_mass(w, num_prefix=2).tolist() == pytest.approx([2 / 3, 2 / 3])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_weights_are_read_in_float32(dtype):
    w = random_weights(2, 2, 1, dtype=torch.float64).to(dtype)
    exact = w.to(torch.float32)
    assert prefix_mass(w).dtype == torch.float32 and attention_distance(w, GRID).dtype == torch.float32
    torch.testing.assert_close(prefix_mass(w), prefix_mass(exact), rtol=0, atol=0)
    torch.testing.assert_close(attention_distance(w, GRID), attention_distance(exact, GRID), rtol=0, atol=0)
    acc = AttentionDistanceAccumulator(GRID)
    acc.update(0, w)
    assert all(v.dtype == torch.float64 for v in acc.compute().values())  # the sums are float64


def test_weights_stay_on_their_device():
    """The distance table follows the weights' device (here ``meta``, which refuses to mix with CPU tensors)."""
    w = torch.empty(2, 3, 13, 13, device="meta")
    assert attention_distance(w, GRID).device.type == "meta" and prefix_mass(w).device.type == "meta"


def test_accumulator_settings_are_checked_to_the_letter():
    for bad in (-1, 1.5, True, "1"):
        with pytest.raises(ValueError, match=rf"^num_prefix must be a non-negative int, got {bad!r}$"):
            AttentionDistanceAccumulator(GRID, num_prefix=bad)
    acc = AttentionDistanceAccumulator(GRID, num_prefix=0)  # no CLS: every token is a patch
    acc.update(0, torch.full((1, 2, 12, 12), 1 / 12))
    assert acc.compute()["prefix_mass"].tolist() == [[0.0, 0.0]]
    with pytest.raises(ValueError, match=r"^attention weights must have shape \(B, H, T, T\), got \(2, 13, 13\)$"):
        AttentionDistanceAccumulator(GRID).update(0, torch.full((2, 13, 13), 1 / 13))
    with pytest.raises(ValueError, match=r"^AttentionDistanceAccumulator\.compute\(\) needs at least one update\(\) first$"):
        AttentionDistanceAccumulator(GRID).compute()


def test_merged_shards_measure_as_one_accumulator():
    """merge (sharded runs): two shards of attention weights give the whole set's distances and prefix mass."""
    from peanchor.metrics.attention_distance import AttentionDistanceAccumulator

    g = torch.Generator().manual_seed(0)
    weights = [torch.softmax(torch.randn(6, 2, 10, 10, generator=g), dim=-1) for _ in range(2)]  # 2 layers, 3x3 + CLS
    whole, first, second = (AttentionDistanceAccumulator((3, 3)) for _ in range(3))
    for layer, w in enumerate(weights):
        whole.update(layer, w)
        first.update(layer, w[:2])
        second.update(layer, w[2:])
    first.merge(second)
    for key, value in whole.compute().items():  # each batch's sums are taken in float32
        torch.testing.assert_close(first.compute()[key], value, atol=1e-6, rtol=0)
    first.reset()
    with pytest.raises(ValueError, match="needs at least one update"):
        first.compute()
