"""peanchor.data as a package: the dataset registry's refusal and ``normalize``."""

from __future__ import annotations

import pytest
import torch

import peanchor.data as data
from peanchor.data import DataSpec, build_datasets
from peanchor.core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("private_cache")


def test_normalize():
    x = torch.tensor([0, 255], dtype=torch.uint8).view(1, 1, 1, 2).expand(1, 3, 1, 2)
    out = data.normalize(x, data.IMAGENET_MEAN, data.IMAGENET_STD)
    assert out.dtype == torch.float32 and out.shape == (1, 3, 1, 2)
    expected = (torch.tensor([0.0, 1.0]) - torch.tensor(data.IMAGENET_MEAN)[:, None]) / torch.tensor(data.IMAGENET_STD)[
        :, None
    ]
    assert torch.allclose(out[0, :, 0], expected)
    with pytest.raises(ValueError):
        data.normalize(x.float(), data.IMAGENET_MEAN, data.IMAGENET_STD)


# ------------------------------------------------------------------------------------------------
# registry and spec


def test_unknown_dataset_lists_valid_names():
    with pytest.raises(ConfigError, match="unknown dataset 'nope'.*scenes.*imagefolder.*cifar10.*prepared"):
        build_datasets(DataSpec(name="nope"))
