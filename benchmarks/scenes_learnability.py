"""Is the ``scenes`` default learnable on a CPU budget, and does a positional code help?

    python3 benchmarks/scenes_learnability.py                      # none and sincos, 400 steps
    python3 benchmarks/scenes_learnability.py --pes none --steps 200 --shifts

A calibration check for ``peanchor/data/scenes.py`` (see docs/scenes.md), not a benchmark of
speed. It trains a small ViT (width 128, 4 blocks, 4 heads, patch 4 at 32 px, MLP ratio 2) on
3000 train images with AdamW (lr 1e-3, wd 0.05, batch 64, translate augmentation, one thread)
and reports val accuracy on 1000 val images, overall and split into the glyph classes (0-5,
shape) and the relation classes (6-9, where the disc is). ``--shifts`` also evaluates under the
32 px paper shifts (JPEG q=58, blur sigma 0.7) to check that the fine textures stay fragile.
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from peanchor.analysis.corrupted_sets import corrupt
from peanchor.analysis.corruptions import paper_shifts
from peanchor.data import IMAGENET_MEAN, IMAGENET_STD, batch_augment, normalize, scenes
from peanchor.models import create_model


def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> dict[str, float]:
    model.eval()
    with torch.no_grad():
        pred = torch.cat(
            [model(normalize(images[i : i + 250], IMAGENET_MEAN, IMAGENET_STD)).argmax(1) for i in range(0, len(images), 250)]
        )
    model.train()
    hit = (pred == labels).float()
    glyph = labels < scenes.NUM_GLYPHS
    return {"all": hit.mean().item(), "glyph": hit[glyph].mean().item(), "relation": hit[~glyph].mean().item()}


def run(pe: str, steps: int, train: tuple, val: tuple, seed: int, shifts: bool, every: int) -> dict:
    torch.manual_seed(seed)
    model = create_model(
        "vit_tiny", pe=pe, num_classes=10, embed_dim=128, depth=4, num_heads=4, mlp_ratio=2.0, drop_path_rate=0.0
    )
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)
    x_train, y_train = train
    g = torch.Generator().manual_seed(seed)
    order, pos, curve, start = torch.randperm(len(x_train), generator=g), 0, [], time.perf_counter()
    for step in range(1, steps + 1):
        if pos + 64 > len(order):
            order, pos = torch.randperm(len(x_train), generator=g), 0
        idx = order[pos : pos + 64]
        pos += 64
        x = normalize(batch_augment(x_train[idx], "translate", generator=g), IMAGENET_MEAN, IMAGENET_STD)
        loss = torch.nn.functional.cross_entropy(model(x), y_train[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % every == 0 or step == steps:
            acc = accuracy(model, *val)
            curve.append({"step": step, "loss": round(loss.item(), 3), **{k: round(v, 3) for k, v in acc.items()}})
            print(pe, curve[-1], f"{time.perf_counter() - start:.0f}s", flush=True)
    out = {"pe": pe, "curve": curve}
    if shifts:
        for name, shift in paper_shifts(32).items():
            shifted = corrupt(val[0], shift, progress=False)
            out[name] = {k: round(v, 3) for k, v in accuracy(model, shifted, val[1]).items()}
            print(pe, name, out[name], flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pes", nargs="+", default=["none", "sincos"])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--every", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shifts", action="store_true")
    args = p.parse_args()
    torch.set_num_threads(1)
    t = time.perf_counter()
    xt, yt = scenes.generate_scenes(3000, split="train")
    xv, yv = scenes.generate_scenes(1000, split="val")
    print(f"generated 4000 images in {time.perf_counter() - t:.2f}s", flush=True)
    train = (torch.from_numpy(xt), torch.from_numpy(yt))
    val = (torch.from_numpy(xv), torch.from_numpy(yv))
    results = [run(pe, args.steps, train, val, args.seed, args.shifts, args.every) for pe in args.pes]
    print(json.dumps(results))


if __name__ == "__main__":
    main()
