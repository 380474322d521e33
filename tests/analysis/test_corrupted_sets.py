"""The corrupted-set cache: one corrupted copy in memory, written once to disk and memory-mapped, and a key reused for
other data refused."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.shifts import Shift
from peanchor.core.errors import DataError

from tests.helpers.images import textured


# ---- the cache ------------------------------------------------------------------------------------
class CountingShift:
    """Wraps a shift and counts how many images it corrupted."""

    def __init__(self, shift: Shift) -> None:
        self.shift, self.calls, self.images = shift, 0, 0

    @property
    def name(self) -> str:
        return self.shift.name

    def describe(self) -> dict:
        return self.shift.describe()

    def __call__(self, images: torch.Tensor, *, start_index: int = 0) -> torch.Tensor:
        self.calls += 1
        self.images += images.shape[0]
        return self.shift(images, start_index=start_index)


def test_cache_in_memory_reuses_the_same_tensor():
    x = textured(5, 16)
    counting = CountingShift(Shift("jpeg", quality=30))
    cache = CorruptedCache(chunk_size=2)
    first = cache.get(x, counting, key="eval")
    assert counting.calls == 3 and counting.images == 5  # chunks of 2
    again = cache.get(x, counting, key="eval")
    assert again is first and counting.calls == 3
    assert torch.equal(first, Shift("jpeg", quality=30)(x))
    # another shift or another set is another entry
    cache.get(x, Shift("jpeg", quality=31), key="eval")
    cache.get(x[:2], counting, key="other")
    assert len(cache) == 3 and counting.calls == 4
    # no key: the content fingerprint stands in
    assert cache.get(x, Shift("blur", sigma=0.5)) is cache.get(x.clone(), Shift("blur", sigma=0.5))


def test_cache_on_disk_is_written_once_and_memory_mapped(tmp_path):
    x = textured(4, 16)
    counting = CountingShift(Shift("gaussian_noise", sigma=0.1))
    first = CorruptedCache(tmp_path, chunk_size=3).get(x, counting, key="scenes/val@16")
    path = CorruptedCache(tmp_path).path_for("scenes/val@16", counting)
    assert path is not None and path.exists() and path.suffix == ".npy"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left behind
    second = CorruptedCache(tmp_path).get(x, counting, key="scenes/val@16")
    assert counting.calls == 2  # the second cache read the file
    assert torch.equal(first, second) and second.dtype == torch.uint8
    assert isinstance(np.load(path, mmap_mode="r"), np.memmap)


def test_cache_refuses_a_key_reused_for_other_data(tmp_path):
    shift = Shift("jpeg", quality=30)
    CorruptedCache(tmp_path).get(textured(4, 16), shift, key="k")
    with pytest.raises(DataError, match="distinct key"):
        CorruptedCache(tmp_path).get(textured(3, 16), shift, key="k")
    cache = CorruptedCache()
    cache.get(textured(4, 16), shift, key="k")
    with pytest.raises(DataError):
        cache.get(textured(2, 16), shift, key="k")
