"""peanchor.metrics.robustness: the Fragility Score and the accuracy, their float64 arithmetic and their refusals."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch

from peanchor.metrics import accuracy, fragility_score



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
