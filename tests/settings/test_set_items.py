"""peanchor.settings.set_items: a --set item is read once (YAML value, key, text), split once, and whatever takes items
takes the read ones as their text; the reading agrees with PyYAML (the reference) but for exponent floats."""

from __future__ import annotations

import pytest
import yaml

from peanchor.analysis.plan import parse_plan_items
from peanchor.core.errors import ConfigError
from peanchor.settings.set_items import SetItem, parse_set_items, read_yaml, split_plan_items
from peanchor.training.config import TrainConfig, apply_overrides


@pytest.mark.parametrize("text", ["1", "0.5", "true", "null", "[1, 0.5]", "hello", "{a: 1}", "'3'"])
def test_values_read_as_pyyaml_reads_them(text) -> None:
    assert read_yaml(text) == yaml.safe_load(text)


def test_exponent_floats_without_a_dot_are_floats() -> None:
    assert read_yaml("3e-4") == 3e-4 and read_yaml("1e9") == 1e9 and yaml.safe_load("3e-4") == "3e-4"


def test_an_item_is_read_once_and_a_read_item_is_itself() -> None:
    item = SetItem.parse("optim.betas=(0.9, 0.95)")
    assert (item.key, item.value, item.raw, str(item)) == ("optim.betas", [0.9, 0.95], "(0.9, 0.95)",
                                                           "optim.betas=(0.9, 0.95)")  # fmt: skip
    assert SetItem.parse(item) is item and parse_set_items([item])[0] is item
    for bad in ("optim.lr", "=3"):
        with pytest.raises(ConfigError, match="expected key=value"):
            SetItem.parse(bad)


def test_read_items_and_their_text_give_the_same_config_and_plan() -> None:
    texts = ["optim.lr=3e-4", "analysis.rpi_draws=2", "train.epochs=3", "analysis.lenses.ssdc.bootstrap=10"]
    others, plan = split_plan_items(texts)
    assert [i.key for i in others] == ["optim.lr", "train.epochs"] and all(i.for_plan for i in plan)
    by_text = apply_overrides(TrainConfig(), None, [t for t in texts if not t.startswith("analysis.")])
    assert apply_overrides(TrainConfig(), None, others) == by_text and by_text.optim.lr == 3e-4
    assert parse_plan_items(plan) == parse_plan_items(t for t in texts if t.startswith("analysis.")) == {
        "rpi_draws": 2, "bootstrap": 10}  # fmt: skip


def test_a_bad_item_says_its_text() -> None:
    with pytest.raises(ConfigError, match=r"^--set 'analysis.draws=2': unknown analysis key"):
        parse_plan_items(split_plan_items(["analysis.draws=2"])[1])
