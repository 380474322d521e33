"""The zoo, audited offline: many architectures with random weights in one process, one row each, written after
every model (so a run that stops resumes where it stopped) as one table, CSV and Markdown.

timm: every model ``timm.list_models(PATTERN)`` names (several patterns: comma-separated), built with 2 blocks, random
weights and an 8 x 8 patch grid (its own size where the name gives no patch size); only the first (the smallest) of each distinct PE configuration (the model class, its table and prefix tokens, its rope module's declared options,
its attention class, whether it takes other sizes) is audited, the others are listed as its duplicates. Every
learned position table is drawn N(0, 0.5²) before the audit (a zero-initialised table shows nothing).
transformers: a ``save_pretrained`` or config-only folder, or a family name (``vit``, ``deit``, ``dinov2``,
``dinov2_with_registers``, ``clip``, ``siglip``, ``dinov3``, ``beit``: that family's default config), built with 2 layers.

Imports: torch; :mod:`peanchor.adapters` (timm and transformers loaders), :mod:`peanchor.core.fileio` (atomic writes).
"""

from __future__ import annotations

import csv
import io
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from peanchor.audit.registry import CHECKS
from peanchor.audit.runner import audit
from peanchor.core.errors import PeanchorError
from peanchor.core.fileio import write_text

__all__ = ["HF_FAMILIES", "hf_entries", "run_zoo", "timm_entries"]

#: family → (config class, model class) in transformers: the default config of each vision family.
HF_FAMILIES = {
    "vit": ("ViTConfig", "ViTModel"), "deit": ("DeiTConfig", "DeiTModel"), "dinov2": ("Dinov2Config", "Dinov2Model"),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", "Dinov2WithRegistersModel"),
    "clip": ("CLIPVisionConfig", "CLIPVisionModel"), "siglip": ("SiglipVisionConfig", "SiglipVisionModel"),
    "dinov3": ("DINOv3ViTConfig", "DINOv3ViTModel"), "beit": ("BeitConfig", "BeitModel"),
}  # fmt: skip
DEPTH = 2
GRID = 8  # patches per side in the zoo (timm)
FIELDS = ["architecture", "backend", "pe", "signature", "result", "seconds"]

Entry = tuple[str, str, Callable[[], Any]]  # (architecture, backend, build)


def timm_entries(pattern: str) -> list[Entry]:
    """Every timm model matching ``pattern`` (several: comma-separated), built with random weights and 2 blocks."""
    import timm

    patterns = [p.strip() for p in pattern.split(",") if p.strip()]
    found = {name for p in patterns for name in timm.list_models(p)}
    names = sorted(found, key=_size_rank)  # the smallest model of a PE configuration is the one audited
    if not names:
        raise PeanchorError(f"no timm model matches {pattern!r}")
    return [(name, "timm", lambda name=name: _timm_build(name)) for name in names]


def _timm_build(name: str) -> Any:
    """``name`` with 2 blocks at a grid of ``GRID`` x ``GRID`` patches where its name gives the patch size (the
    PE's configuration is kept, its cost is not), else at its own size."""
    from peanchor.adapters import load_timm_model

    patch = re.search(r"patch(\d+)", name)
    # NaFlexViT runs at its table's own grid (pos_embed_grid_size, which img_size does not set)
    naflex = {"pos_embed_grid_size": (GRID, GRID)} if name.startswith("naflexvit") else {}
    if patch:
        try:
            return load_timm_model(name, depth=DEPTH, img_size=int(patch.group(1)) * GRID, **naflex)
        except PeanchorError:  # a model that takes no img_size: its own
            pass
    return load_timm_model(name, depth=DEPTH)


#: Size words in timm's names, smallest first: the zoo audits the smallest model of each PE configuration.
SIZES = ("micro", "pico", "nano", "tiny", "little", "small", "medium", "mediumd", "betwixt", "base", "large",
         "huge", "giant", "gigantic", "so400m", "so150m", "1b", "5b", "7b")  # fmt: skip


def _size_rank(name: str) -> tuple[int, str]:
    words = name.replace(".", "_").split("_")
    ranks = [SIZES.index(w) for w in words if w in SIZES]
    return (ranks[0] if ranks else len(SIZES), name)


def hf_entries(configs: list[str]) -> list[Entry]:
    """transformers models from folders (their config, random weights) or family names (the default config)."""
    return [(str(c), "transformers", lambda c=c: _hf_build(str(c))) for c in configs]


def _hf_build(config: str) -> Any:
    import transformers

    from peanchor.adapters.backend import wrap_model

    if Path(config).exists():
        folder = Path(config).parent if Path(config).is_file() else Path(config)
        cfg = transformers.AutoConfig.from_pretrained(folder, local_files_only=True)
        cfg.num_hidden_layers = DEPTH
        model = transformers.AutoModel.from_config(cfg)
    elif config in HF_FAMILIES:
        config_cls, model_cls = (getattr(transformers, n) for n in HF_FAMILIES[config])
        model = model_cls(config_cls(num_hidden_layers=DEPTH))
    else:
        raise PeanchorError(f"--hf {config}: neither a folder nor a family ({', '.join(HF_FAMILIES)})")
    return wrap_model(model.eval())


#: The parameter names of learned position tables (timm, transformers; BEiT's relative bias tables too).
TABLES = ("pos_embed", "position_embeddings", "position_embedding.weight", "relative_position_bias_table",
          "pos_embed_y", "pos_embed_x")  # fmt: skip  (the last two: NaFlexViT's factorized row and column tables)


def _draw_tables(wrapped: Any) -> None:
    """Every learned position table drawn N(0, 0.5²): some libraries initialise it at zero (DeiT in transformers),
    and a zero table is invisible to every check."""
    with torch.no_grad():
        for key, param in wrapped.named_parameters():
            if key.endswith(TABLES):
                param.normal_(std=0.5)


def signature(wrapped: Any) -> str:
    """What decides the PE's behaviour, not the model's size: equal signatures audit alike (its backend says)."""
    from peanchor.adapters.backend import backend_of

    backend = backend_of(wrapped)
    return backend.signature(wrapped) if backend is not None else type(wrapped).__name__


def _read(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    return list(csv.DictReader(io.StringIO(path.read_text())))


def _write(out: Path, rows: list[dict[str, str]]) -> None:
    columns = FIELDS + list(CHECKS)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    write_text(out.with_suffix(".csv"), buffer.getvalue())
    audited = [r for r in rows if r["result"] in ("passed", "FAILED")]
    skipped = [r for r in rows if r["result"].startswith("skipped")]
    lines = ["| " + " | ".join(["architecture", "PE", "result", "s"] + list(CHECKS)) + " |",
             "|" + "---|" * (4 + len(CHECKS))]  # fmt: skip
    for r in audited:
        lines.append("| " + " | ".join([r["architecture"], r["pe"], r["result"], r["seconds"]]
                                       + [r.get(c, "") for c in CHECKS]) + " |")  # fmt: skip
    same = len(rows) - len(audited) - len(skipped)
    lines.append(f"\n{len(audited)} audited ({sum(r['result'] == 'FAILED' for r in audited)} failed); {same} more "
                 f"share a PE configuration with one above; {len(skipped)} cannot be built or wrapped:\n")
    reasons: dict[str, list[str]] = {}
    for r in skipped:
        reasons.setdefault(r["result"].removeprefix("skipped: ")[:110], []).append(r["architecture"])
    lines += [f"- {why}: {', '.join(names)}" for why, names in reasons.items()]
    write_text(out.with_suffix(".md"), "\n".join(lines) + "\n")


def run_zoo(entries: list[Entry], out: str | Path, *, dtype: str = "fp32",
            progress: Callable[[str], None] | None = None) -> list[dict[str, str]]:  # fmt: skip
    """Audit each entry not already in ``out``.csv (resumable), one PE configuration once; the table's rows."""
    out = Path(out)
    rows = _read(out.with_suffix(".csv"))
    done = {r["architecture"] for r in rows}
    first = {r["signature"]: r["architecture"] for r in rows if r["signature"] and not r["result"].startswith("same")}
    for name, backend, build in entries:
        if name in done:
            continue
        row = {"architecture": name, "backend": backend, "pe": "", "signature": "", "result": "", "seconds": ""}
        start = time.perf_counter()
        try:
            torch.manual_seed(0)
            wrapped = build()
            _draw_tables(wrapped)
            row["signature"] = signature(wrapped)
            row["pe"] = str(getattr(wrapped, "pe_name", ""))
            if row["signature"] in first:
                row["result"] = f"same PE as {first[row['signature']]}"
            else:
                first[row["signature"]] = name
                report = audit(wrapped, name=name, dtype=dtype)
                row["result"] = "passed" if report.passed else "FAILED"
                for c in report.checks:
                    row[c.name] = c.status + ("" if c.measured is None else f" {c.measured:.2g}")
        except Exception as e:  # noqa: BLE001  (cannot be built or wrapped: the row says so, the zoo goes on)
            row["result"] = "skipped: " + f"{type(e).__name__}: {e}".splitlines()[0][:160]
        row["seconds"] = f"{time.perf_counter() - start:.1f}"
        rows.append(row)
        _write(out, rows)
        if progress is not None:
            progress(f"{name}: {row['result']} ({row['seconds']} s)")
    _write(out, rows)  # a finished run rewrites its tables too
    return rows


def entries_for(timm_pattern: str | None, hf: list[str]) -> Iterator[Entry]:
    if timm_pattern:
        yield from timm_entries(timm_pattern)
    yield from hf_entries(hf)
