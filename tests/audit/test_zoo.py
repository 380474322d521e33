"""The zoo: many architectures with random weights in one process, one PE configuration audited once, a CSV and a
Markdown table written after every model, and a second run resumes without auditing anything again."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

timm = pytest.importorskip("timm")
T = pytest.importorskip("transformers")

from peanchor.adapters import load_timm_model  # noqa: E402
from peanchor.audit import CHECKS  # noqa: E402
from peanchor.audit.zoo import hf_entries, run_zoo, signature  # noqa: E402

SMALL = dict(img_size=32, patch_size=8, depth=2, embed_dim=64, num_heads=4, num_classes=10)


def entries() -> list:
    def build(name: str, **extra: object):
        return lambda: load_timm_model(name, **dict(SMALL, **extra))

    return [("ape_a", "timm", build("vit_small_patch16_224")), ("ape_b", "timm", build("vit_base_patch16_224")),
            ("rope", "timm", build("vit_small_patch16_rope_224")), ("broken", "timm", lambda: load_timm_model("resnet18"))]  # fmt: skip


def test_one_pe_configuration_is_audited_once_and_the_run_resumes(tmp_path: Path) -> None:
    out = tmp_path / "zoo"
    rows = run_zoo(entries(), out)
    by = {r["architecture"]: r for r in rows}
    assert by["ape_a"]["result"] == "passed" and by["rope"]["result"] == "passed"
    assert by["ape_b"]["result"] == "same PE as ape_a"
    assert by["broken"]["result"].startswith("skipped: ConfigError: timm model class")
    assert all(by["rope"][c].split()[0] in ("pass", "n/a") for c in CHECKS)
    table = list(csv.DictReader((tmp_path / "zoo.csv").open()))
    assert [r["architecture"] for r in table] == ["ape_a", "ape_b", "rope", "broken"]
    markdown = (tmp_path / "zoo.md").read_text()
    assert "| rope | timm:rope |" in markdown and "ape_b" not in markdown

    def never() -> None:
        raise AssertionError("a finished entry was built again")

    again = run_zoo([(name, "timm", never) for name, _, _ in entries()], out)
    assert again == table


def test_a_config_only_transformers_folder_is_audited_with_random_weights(tmp_path: Path) -> None:
    config = T.ViTConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=64,
                         image_size=32, patch_size=8)  # fmt: skip
    config.save_pretrained(tmp_path / "vit")
    (row,) = run_zoo(hf_entries([str(tmp_path / "vit")]), tmp_path / "zoo")
    assert row["result"] == "passed" and row["signature"] == "vit registers=0", row


def test_the_signature_ignores_size_and_sees_the_pe() -> None:
    a = signature(load_timm_model("vit_small_patch16_224", **SMALL))
    b = signature(load_timm_model("vit_small_patch16_224", **dict(SMALL, embed_dim=128)))
    c = signature(load_timm_model("vit_small_patch16_224", **dict(SMALL, no_embed_class=True)))
    assert a == b and a != c
