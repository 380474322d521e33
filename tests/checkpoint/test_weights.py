"""peanchor.checkpoint.weights: safe reading (no code runs), nesting and wrapper prefixes, the one-line strict-load diff."""

from __future__ import annotations

import struct

import pytest
import torch
from safetensors.torch import save_file

from peanchor.core.errors import CheckpointError
from peanchor.checkpoint.weights import load_strict, read_safetensors, read_state_dict, state_dict_diff


def test_a_safetensors_header_length_that_starts_like_a_pickle_still_loads(tmp_path):
    """A header length whose low byte is 0x80 begins with the pickle opcode PROTO; it is still safetensors."""
    tensors = {"w": torch.arange(4.0)}
    for pad in range(64):
        path = tmp_path / f"w{pad}.safetensors"
        save_file(tensors, str(path), metadata={"pad": "x" * pad})
        if path.read_bytes()[0] == 0x80:
            break
    else:  # pragma: no cover
        pytest.fail("no metadata length gave a header length with low byte 0x80")
    (header_len,) = struct.unpack("<Q", path.read_bytes()[:8])
    assert header_len % 256 == 0x80
    got, meta = read_safetensors(path)
    assert torch.equal(got["w"], tensors["w"]) and meta["pad"] == "x" * pad


def test_nested_and_wrapped_state_dicts_come_out_bare(tmp_path):
    sd = {"module._orig_mod.blocks.0.w": torch.ones(2), "module._orig_mod.head.b": torch.zeros(1)}
    torch.save({"epoch": 3, "state_dict": sd}, tmp_path / "ckpt.pt")
    assert sorted(read_state_dict(tmp_path / "ckpt.pt")) == ["blocks.0.w", "head.b"]
    save_file({"module.w": torch.ones(1)}, str(tmp_path / "w.safetensors"))
    assert list(read_state_dict(tmp_path / "w.safetensors")) == ["w"]


class _RunsCode:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_code_in_a_pickle_is_refused_before_it_runs(tmp_path, capsys):
    torch.save({"model": {"w": torch.ones(1)}, "hook": _RunsCode()}, tmp_path / "evil.pt")
    with pytest.raises(CheckpointError, match="refusing to unpickle") as e:
        read_state_dict(tmp_path / "evil.pt")
    assert "\n" not in str(e.value) and "this must never run" not in capsys.readouterr().out


def test_strict_load_names_every_difference_in_one_line():
    model = torch.nn.Linear(3, 2)
    good = {k: torch.zeros_like(v) for k, v in model.state_dict().items()}
    assert state_dict_diff(model.state_dict(), good) is None
    load_strict(model, good, "ctx")
    assert torch.equal(model.weight, torch.zeros(2, 3))
    bad = {"weight": torch.zeros(2, 4), "extra": torch.zeros(1)}
    with pytest.raises(CheckpointError) as e:
        load_strict(model, bad, "file.pt does not fit", " (hint)")
    message = str(e.value)
    assert message == ("file.pt does not fit: missing bias; unexpected extra; "
                       "shape mismatch weight (2, 4) in the file vs (2, 3) in the model (hint)")  # fmt: skip
