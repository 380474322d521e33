"""Cost of each PE family against ``ape``: a training step and an analysis pass of the families preset's model.

    python3 benchmarks/bench_families.py --threads 1           # the families preset's ViT @ 32 px, patch 8
    python3 benchmarks/bench_families.py --threads 1 --patch 4 # the cpu preset's grid (8 x 8 = 64 tokens)
    python3 benchmarks/bench_families.py --quick --threads 1   # small batches, 2 reps

Every PE of the families preset (``peanchor.presets.catalog.FAMILY_CONDITIONS``) in one run, interleaved repetitions, ratios
of medians against ``ape``:

* ``train``: one AdamW step, batch 64 (the preset's), as ``peanchor train --preset families`` runs it (training
  mode: DINOv3's coordinate augmentation draws each step).
* ``analysis``: one eval pass returning every block's tokens, batch 500 (the preset's eval batch), under
  ``torch.inference_mode``.
* ``build``: building the PE's per-pass tables alone (``rotary``/``rotation``/``attn_bias``/``table_rows`` at
  α = 1, no gradient), in ms: LieRE's and ComRoPE's matrix exponentials (once per position and block, never per
  pair of tokens) and STRING's Cayley solve are here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch

from peanchor.models import create_model
from peanchor.presets.catalog import FAMILY_CONDITIONS

NAME = "families"
PRESET = {"embed_dim": 128, "depth": 3, "num_heads": 4, "mlp_ratio": 2.0, "drop_path_rate": 0.0}


def _build(pe: torch.nn.Module) -> None:
    with torch.no_grad():
        pe.rotary(1.0), pe.rotation(1.0), pe.attn_bias(1.0), pe.table_rows(1.0)


def run(model_name: str, img_size: int, batch: int, reps: int, patch: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, img_size, img_size, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    x_eval = torch.randn(batch * 8 if batch < 64 else 500, 3, img_size, img_size, generator=g)
    models, optims = {}, {}
    for pe in FAMILY_CONDITIONS:
        torch.manual_seed(0)
        models[pe] = create_model(model_name, pe=pe, num_classes=10, img_size=img_size, patch_size=patch, **PRESET)
        optims[pe] = torch.optim.AdamW(models[pe].parameters(), lr=1e-3)
    tokens = models["ape"].num_patches
    print(f"{model_name} (families preset) @ {img_size} px, patch {patch}: {tokens} patches, batch {batch} "
          f"(eval {len(x_eval)}), {reps} reps", flush=True)  # fmt: skip

    def train_step(pe: str) -> Callable[[], None]:
        def step() -> None:
            m, opt = models[pe].train(), optims[pe]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()

        return step

    def analysis_pass(pe: str) -> Callable[[], None]:
        def forward() -> None:
            with torch.inference_mode():
                models[pe].eval().forward_intermediates(x_eval)

        return forward

    def build(pe: str) -> Callable[[], None]:
        return lambda: _build(models[pe].eval().pe)

    record: dict[str, Any] = {"model": model_name, "img_size": img_size, "patch": patch, "batch": batch, "reps": reps,
                              "results": {}}  # fmt: skip
    for name, make in {"train": train_step, "analysis": analysis_pass, "build": build}.items():
        print(f"{name}:", flush=True)
        times = bc.interleaved({pe: make(pe) for pe in FAMILY_CONDITIONS}, reps, warmup=1, log=False)
        rows = {pe: {"median_ms": bc.median(times[pe]) * 1e3, "ratio_to_ape": bc.ratio(times[pe], times["ape"]),
                     "paired": bc.paired_ratio(times[pe], times["ape"])} for pe in FAMILY_CONDITIONS}  # fmt: skip
        record["results"][name] = {"rows": rows, "timings": bc.all_stats(times)}
        for pe, row in rows.items():
            print(f"  {pe:12s} {row['median_ms']:9.2f} ms   / ape {row['ratio_to_ape']:6.2f} "
                  f"(paired {row['paired']:.2f})", flush=True)  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    patch = 4 if argv is not None and "--patch" in argv and argv[argv.index("--patch") + 1] == "4" else 8
    rest = [a for i, a in enumerate(argv or []) if a != "--patch" and (i == 0 or (argv or [])[i - 1] != "--patch")]
    name = NAME if patch == 8 else f"{NAME}_patch{patch}"
    return bc.model_size_main(name, __doc__, lambda m, s, b, r: run(m, s, b, r, patch), model="vit_tiny",
                              img_size=32, batch=(8, 64), reps=(2, 7), goal="reported (ratios to ape)",
                              argv=rest)  # fmt: skip


if __name__ == "__main__":
    main(sys.argv[1:])
