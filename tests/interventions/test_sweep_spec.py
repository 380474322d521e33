"""The sweep spec (``--sweep``): the last parameter is swept over its comma-separated doses, a set of indices joined
with ``+``, a range ``A..B`` expanded; every dose read by the kind's own readers; a fault is one line."""

from __future__ import annotations

import pytest

from peanchor.core.errors import ConfigError, PeanchorError
from peanchor.interventions import Intervention, SweepSpec


@pytest.mark.parametrize(
    ("text", "parameter", "doses", "first"),
    [
        ("rope_planes:freqs=0-0,0-3,0-7,0-11", "freqs", ("0-0", "0-3", "0-7", "0-11"),
         "rope_planes:layers=all,heads=all,axis=both,freqs=0"),
        ("pe_resample:grid=7x7,14x14,21x21,28x28", "grid", ("7x7", "14x14", "21x21", "28x28"),
         "pe_resample:grid=7x7,mode=bicubic,antialias=true,rope_positions=extrapolate"),
        ("patch:site=mlp,layer=0..2", "layer", ("0", "1", "2"), "patch:site=mlp,layer=0,donor=clean,seed=0"),
        ("rope_planes:axis=x,freqs=none,0,1", "freqs", ("none", "0", "1"),
         "rope_planes:layers=all,heads=all,axis=x,freqs=none"),
    ],
)  # fmt: skip
def test_the_last_parameter_is_swept_over_its_doses(text, parameter, doses, first) -> None:
    sweep = SweepSpec.parse(text)
    assert (sweep.parameter, sweep.doses) == (parameter, doses)
    edits = sweep.edits()
    assert len(edits) == len(doses)
    assert edits[0].spec == first
    # each dose is the edit --intervention reads from the same text
    for dose, edit in zip(doses, edits):
        assert edit.spec == Intervention.parse(sweep.dose_spec(dose)).edits[0].spec


def test_a_union_is_joined_with_plus_and_a_fixed_parameter_keeps_its_value() -> None:
    sweep = SweepSpec.parse("head_ablate:layers=0+2,heads=0+1,2..3")
    assert sweep.fixed == (("layers", "0+2"),)
    assert sweep.doses == ("0+1", "2", "3")
    assert [(e.layers, e.heads) for e in sweep.edits()] == [((0, 2), (0, 1)), ((0, 2), (2,)), ((0, 2), (3,))]


def test_the_text_round_trips_with_ranges_expanded() -> None:
    sweep = SweepSpec.parse(" head_ablate:heads=1,layers=0..2,5+7 ")
    assert sweep.text == "head_ablate:heads=1,layers=0,1,2,5+7"
    assert SweepSpec.parse(sweep.text) == sweep


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rope_plane:freqs=0", "unknown intervention 'rope_plane' (did you mean 'rope_planes'?); valid: head_ablate,"),
        ("rope_planes:frqs=0,1", "intervention rope_planes has no parameter 'frqs'; valid: layers, heads, axis, freqs"),
        ("rope_planes:freqs=0,x", "rope_planes:freqs=x: expected indices and ranges like 0-3,7, 'all' or 'none'"),
        ("pe_resample:grid=7x7,0x3", "pe_resample:grid=0x3: expected ROWSxCOLS of patches, e.g. 14x14"),
        ("head_ablate:layers=0,2,heads=1", "the fixed parameter layers=0,2 holds a comma (only the last parameter is "
                                           "swept); write a set of indices with '+', e.g. layers=0+2"),
        ("patch:layer=3..1", "the range 3..1 runs backwards"),
        ("patch:layer=1,,2", "an empty dose"),
        ("patch:layer=1,1", "the dose layer=1 is given twice"),
        ("patch:layer=1,layer=2", "'layer' is given twice"),
        ("pe_zero", "no parameter to sweep"),
        ("pe_zero+patch:layer=1", "unknown intervention 'pe_zero+patch'"),
    ],
)  # fmt: skip
def test_a_bad_sweep_is_one_line_naming_what_is_valid(text, message) -> None:
    with pytest.raises(PeanchorError) as e:
        SweepSpec.parse(text)
    assert message in str(e.value)
    assert "\n" not in str(e.value)
    assert isinstance(e.value, ConfigError) and str(e.value).startswith(f"sweep {text!r}: ")
