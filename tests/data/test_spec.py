"""peanchor.data.spec: a data spec read from and written to a dict, and its refusals."""

from __future__ import annotations

import pytest

from peanchor.data import DataSpec
from peanchor.core.errors import ConfigError

pytestmark = pytest.mark.usefixtures("private_cache")


def test_spec_from_dict_and_validation():
    spec = DataSpec.from_dict({"name": "cifar10", "root": "/x", "img_size": 64})
    assert spec.to_dict()["img_size"] == 64 and DataSpec.from_dict(spec.to_dict()) == spec
    with pytest.raises(ConfigError, match="unknown data key.*colour.*valid keys"):
        DataSpec.from_dict({"colour": 1})
    with pytest.raises(ConfigError, match="img_size"):
        DataSpec(img_size=0).validate()
    with pytest.raises(ConfigError, match="augment"):
        DataSpec(augment="heavy").validate()
