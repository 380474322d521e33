"""Shifts are plug-ins: every module of ``peanchor/analysis/shifts/kinds/`` registers its kind, and a kind added to the
registry is parsed, checked, named, described, swept by severity and listed in the help and the errors with no edit
elsewhere; ``register`` refuses a malformed kind. (A :class:`Shift` as a value: tests/analysis/shifts/test_shift.py.)"""

from __future__ import annotations

import pkgutil

import pytest
import torch

import peanchor.analysis.shifts.kinds as kinds_package
from peanchor.analysis.shift_specs import parse_shift_spec, parse_shift_specs
from peanchor.analysis.shifts import SHIFT_KINDS, Shift, severity_table, shift_help
from peanchor.analysis.shifts.base import KINDS, Param, ShiftKind, register
from peanchor.analysis.shifts.registry import kinds_line
from peanchor.core.errors import ConfigError


def test_every_module_of_the_kinds_package_is_one_registered_kind():
    modules = sorted(m.name for m in pkgutil.iter_modules(kinds_package.__path__))
    assert modules == sorted(SHIFT_KINDS) == sorted(KINDS)
    assert {"shot_noise", "defocus_blur"} <= set(SHIFT_KINDS)


@pytest.fixture
def invert():
    """A kind written in the test, as a new module would: ``invert`` blends towards the negative by ``amount``; it
    also takes a required ``level``, and two optional parameters, one of them a seed allowed beside a severity."""

    @register
    class Invert(ShiftKind):
        name = "invert"
        summary = "blend towards the negative"
        params = (Param("amount", float, "in [0, 1]", lambda a: 0 <= a <= 1, True, abbrev="a", metavar="A"),
                  Param("level", int, required=True, abbrev="l", metavar="L"),
                  Param("seed", int, default=0, metavar="N", with_severity=True),
                  Param("gain", float, default=1.0, abbrev="g", metavar="G"))  # fmt: skip
        table_params = ("amount", "level")
        tables = {"imagenet-c": tuple((a, 1) for a in (0.1, 0.2, 0.3, 0.4, 0.5)),
                  "cifar-10-c": tuple((a, 2) for a in (0.2, 0.4, 0.6, 0.8, 1.0))}  # fmt: skip

        def check(self, values):
            if values["gain"] * values["amount"] > 1:
                raise ConfigError("invert gain * amount must be <= 1")

        def kernel(self, images, start_index, *, amount, level, seed, gain):
            return ((1 - amount) * images.float() + amount * (255 - images.float())).round().byte()

    yield KINDS["invert"]
    del KINDS["invert"]


def test_a_registered_kind_works_everywhere_without_other_edits(invert):
    shift = parse_shift_spec("invert:amount=0.25,level=3").shift(32)
    assert shift.describe() == {"kind": "invert", "amount": 0.25, "level": 3, "seed": 0, "gain": 1.0}
    assert shift.name == "invert_a0.25_l3" and Shift("invert", amount=0.5, level=1, gain=2.0).name == "invert_a0.5_l1_g2"
    assert Shift.from_dict(shift.describe()) == shift and shift.amount == 0.25
    x = torch.full((1, 3, 4, 4), 200, dtype=torch.uint8)
    assert int(shift(x)[0, 0, 0, 0]) == round(0.75 * 200 + 0.25 * 55)
    assert parse_shift_spec("invert:severity=5,seed=3").shift(32).describe() == {"kind": "invert", "amount": 1.0,
                                                                                 "level": 2, "seed": 3, "gain": 1.0}
    assert [(s.amount, s.level) for s in severity_table(224, ["invert"])["invert"]] == [(0.1, 1), (0.2, 1), (0.3, 1),
                                                                                         (0.4, 1), (0.5, 1)]
    with pytest.raises(ConfigError, match=r"invert gain \* amount must be <= 1"):
        Shift("invert", amount=0.6, level=1, gain=2.0)
    assert "invert" not in severity_table(64)  # no Tiny-ImageNet-C table: left out of the full sweep
    with pytest.raises(ConfigError, match="no severity table for shift kind 'invert'"):
        severity_table(64, ["invert"])
    with pytest.raises(ConfigError, match="has no tiny-imagenet-c severity table"):
        parse_shift_specs(["invert:severity=2"])[0].shift(64)
    assert ", invert:amount=A,level=L[,seed=N][,gain=G], " in shift_help()
    assert "; invert (amount, level, seed, gain); " in kinds_line()
    with pytest.raises(ConfigError, match=r"invert amount must be in \[0, 1\], got 1.5"):
        parse_shift_spec("invert:amount=1.5,level=1")
    with pytest.raises(ConfigError, match="invert needs amount=... "):
        parse_shift_spec("invert:seed=1")
    with pytest.raises(ConfigError, match="seed='0.5' is not an integer"):
        parse_shift_spec("invert:amount=0.5,level=1,seed=0.5")


def test_the_help_and_the_kinds_line_read_in_full():
    assert shift_help().startswith("KIND:key=value[,key=value], repeatable; replaces the preset's shift of that kind "
                                   "or adds one: blur:sigma=S[,kernel_size=K], contrast:factor=F, ")  # fmt: skip
    assert shift_help().endswith(", shot_noise:photons=P[,seed=N], or KIND:severity=1..5 (the ImageNet-C-style table "
                                 "for the model's resolution), e.g. --shift jpeg:quality=10 --shift "
                                 "blur:sigma=1.5,kernel_size=9")  # fmt: skip
    assert kinds_line().startswith("blur (kernel_size, sigma); contrast (factor); defocus_blur (radius, alias_blur); ")
    assert kinds_line().endswith("; shot_noise (photons, seed); each also takes severity=1..5")


# A well-formed kind's attributes, one value per severity row.
PROBE_KIND = {"name": "probe_kind", "summary": "", "params": (Param("level", required=True),),
              "table_params": ("level",), "tables": {"imagenet-c": (1, 2, 3, 4, 5)}}  # fmt: skip


def test_register_takes_a_well_formed_kind_with_one_value_per_row():
    try:
        register(type("ProbeKind", (ShiftKind,), PROBE_KIND))
        assert KINDS["probe_kind"].table_values("imagenet-c", 2) == {"level": 2.0}
    finally:
        KINDS.pop("probe_kind", None)


@pytest.mark.parametrize(
    "change,message",
    [({"name": "jpeg"}, "registered twice"), ({"name": "not a name"}, "not an identifier"),
     ({"tables": {"imagenet-c": (1, 2, 3, 4)}}, "needs 5 rows"), ({"tables": {"mnist-c": (1, 2, 3, 4, 5)}}, "needs 5"),
     ({"tables": {"cifar-10-c": ((1, 2),) * 5}}, "needs 5 rows"), ({"table_params": ("other",)}, "not all parameters"),
     ({"table_params": ()}, "must be distinct"), ({"params": (Param("kind"),)}, "must be distinct"),
     ({"params": (Param("level"), Param("severity"))}, "must be distinct")],
)  # fmt: skip
def test_register_refuses_a_malformed_kind(change, message):
    attrs = {**PROBE_KIND, **change}
    before = dict(KINDS)
    with pytest.raises(ValueError, match=message):
        register(type("ProbeKind", (ShiftKind,), attrs))
    assert KINDS == before
