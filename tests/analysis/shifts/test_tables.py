"""The resolution rule: the severity table an image size takes, its thresholds, and the paper's shifts per resolution."""

from __future__ import annotations

import json

import pytest

from peanchor.analysis import shifts as C
from peanchor.analysis.shifts import Shift, paper_shifts, severity_shift, severity_table, table_name
from peanchor.core.errors import ConfigError


TABLE_SIZES = {"imagenet-c": 224, "cifar-10-c": 32, "tiny-imagenet-c": 64}


# ---- tables and presets -------------------------------------------------------------------------
@pytest.mark.parametrize("name,size", TABLE_SIZES.items())
def test_severity_table_uses_the_table_for_the_resolution(name, size):
    assert table_name(size) == name
    table = severity_table(size)
    assert list(table) == list(C.SHIFT_KINDS)  # every kind has all three tables (the values: test_kinds.py)
    assert all(len(v) == 5 and len(set(v)) == 5 for v in table.values())
    assert table == {kind: [severity_shift(kind, level, size) for level in range(1, 6)] for kind in table}
    for s in table["blur"]:
        assert s.kernel_size is not None and s.kernel_size % 2 == 1 and s.kernel_size <= size
    for shifts in table.values():
        for s in shifts:  # every description is JSON-able and rebuilds the same shift
            assert Shift.from_dict(json.loads(json.dumps(s.describe()))) == s


def test_table_thresholds():
    assert [table_name(s) for s in (1, 16, 48, 49, 96, 159, 160, 384)] == [
        "cifar-10-c", "cifar-10-c", "cifar-10-c", "tiny-imagenet-c", "tiny-imagenet-c", "tiny-imagenet-c", "imagenet-c",
        "imagenet-c"
    ]
    for bad in (0, -32, True, 32.0):
        with pytest.raises(ConfigError, match="img_size must be a positive integer"):
            table_name(bad)
    with pytest.raises(ConfigError, match="no severity table for shift kind 'snow'; expected one of blur, contrast, "):
        severity_table(32, ["snow"])


def test_paper_shifts_per_resolution():
    big = paper_shifts(224)
    assert big["jpeg"].describe() == {"kind": "jpeg", "quality": 5}
    assert big["blur"].describe() == {"kind": "blur", "kernel_size": 5, "sigma": 2.5}
    small = paper_shifts(32)
    assert small["jpeg"].quality == 58 and small["blur"].sigma == 0.7
    mid = paper_shifts(64)
    assert mid["jpeg"].quality == 50 and mid["blur"].sigma == 1.0
    for shifts in (small, mid):
        k = shifts["blur"].kernel_size
        assert k is not None and k % 2 == 1
    assert C.paper_shifts_source(224) == "paper"
    assert C.paper_shifts_source(32) == "cifar-10-c severity 3"
