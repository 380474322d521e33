"""Cost of the rotary rotation as written now against the slicing version it replaced, in the cpu preset's rope model.

    python3 benchmarks/bench_rotary.py --threads 1           # the cpu preset's rope ViT @ 32 px, batch 64 / 500
    python3 benchmarks/bench_rotary.py --quick --threads 1   # the same model, small batches, 2 reps

``RotaryTables.apply`` rotates q and k in every block. The version before rotated the patch tokens alone: it
sliced them off the prefix, built the rotated copy with a negated half, and concatenated the prefix back
(``sliced`` below). The version now multiplies the whole sequence by tables padded with ``cos = 1, sin = 0`` for
the prefix and a pre-signed sine (``padded``). Both give the same bits, forwards and backwards, which this script
checks before it times anything.

Three measurements, each side by side in one run (interleaved repetitions, ratios of medians):

* ``train``: one AdamW step of the cpu preset's model (vit_tiny overridden to 128 wide, 4 blocks, 4 heads, patch
  4 on 32 px: 64 patch tokens and CLS), batch 64, as ``peanchor train --preset cpu --pe rope`` runs it. Goal:
  padded / sliced <= 0.97 (the rotation is a few percent of a step: most of it is the GEMMs).
* ``analysis``: one eval pass returning every block's tokens, batch 500 (the cpu preset's eval batch), under
  ``torch.inference_mode``. Goal <= 0.97.
* ``rotation``: the rotation alone on a (64, 4, 65, 32) strided q, forward and backward. Reported.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch
from torch import Tensor

from peanchor.models import create_model
from peanchor.pe.base import RotaryTables

NAME = "rotary"
GOAL = 0.97
CPU_PRESET = {"embed_dim": 128, "depth": 4, "num_heads": 4, "mlp_ratio": 2.0, "drop_path_rate": 0.0}


def _sliced(self: RotaryTables, t: Tensor, num_prefix: int) -> Tensor:
    """The rotation as it was written before: the patch tokens sliced off, rotated, and concatenated back."""
    prefix, patches = t[:, :, :num_prefix], t[:, :, num_prefix:]
    b, h, n, hd = patches.shape
    halves = patches.reshape(b, h, n, self.groups, 2, hd // (2 * self.groups))
    rotated = torch.stack((-halves[..., 1, :], halves[..., 0, :]), dim=-2).reshape(b, h, n, hd)
    return torch.cat((prefix, patches * self.cos + rotated * self.sin), dim=2)


PADDED: Callable[..., Tensor] = RotaryTables.apply
VARIANTS = {"sliced": _sliced, "padded": PADDED}


def _using(variant: str, fn: Callable[[], Any]) -> Callable[[], Any]:
    def call() -> Any:
        RotaryTables.apply = VARIANTS[variant]  # type: ignore[method-assign]
        try:
            return fn()
        finally:
            RotaryTables.apply = PADDED  # type: ignore[method-assign]

    return call


def _same_bits(model: torch.nn.Module, x: Tensor, y: Tensor) -> bool:
    """Whether both rotations give the model the same logits and the same gradients, to the bit."""
    outs = {}
    for variant in VARIANTS:
        m = copy.deepcopy(model)

        def step(m: torch.nn.Module = m) -> tuple[Tensor, list[Tensor]]:
            loss = torch.nn.functional.cross_entropy(logits := m(x), y)
            loss.backward()
            return logits.detach(), [p.grad.clone() for p in m.parameters() if p.grad is not None]

        outs[variant] = _using(variant, step)()
    (a, ga), (b, gb) = outs["sliced"], outs["padded"]
    return torch.equal(a, b) and len(ga) == len(gb) and all(torch.equal(p, q) for p, q in zip(ga, gb))


def run(model_name: str, img_size: int, batch: int, reps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = create_model(model_name, pe="rope", num_classes=10, img_size=img_size, patch_size=4, **CPU_PRESET)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(batch, 3, img_size, img_size, generator=g)
    y = torch.randint(0, 10, (batch,), generator=g)
    x_eval = torch.randn(batch * 8 if batch < 64 else 500, 3, img_size, img_size, generator=g)
    same = _same_bits(model, x, y)
    if not same:
        raise AssertionError("the two rotations give different logits or gradients")
    print(f"{model_name} (cpu preset) rope @ {img_size} px, {model.num_patches} patches, batch {batch} "
          f"(eval {len(x_eval)}), {reps} reps; both rotations give the same logits and gradients", flush=True)  # fmt: skip

    trainers = {v: copy.deepcopy(model).train() for v in VARIANTS}
    optims = {v: torch.optim.AdamW(m.parameters(), lr=1e-3) for v, m in trainers.items()}

    def train_step(variant: str) -> Callable[[], None]:
        def step() -> None:
            m, opt = trainers[variant], optims[variant]
            opt.zero_grad(set_to_none=True)
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()

        return _using(variant, step)

    evaluated = model.eval()

    def analysis_pass(variant: str) -> Callable[[], None]:
        def forward() -> None:
            with torch.inference_mode():
                evaluated.forward_intermediates(x_eval)

        return _using(variant, forward)

    heads = model.blocks[0].attn.num_heads
    hd = model.cls_token.shape[-1] // heads
    tables = model.pe.rotary(1.0).layer(0)
    qkv = torch.randn(batch, model.num_patches + 1, 3, heads, hd, generator=g, requires_grad=True)
    upstream = torch.randn(batch, heads, model.num_patches + 1, hd, generator=g)

    def rotation(variant: str) -> Callable[[], None]:
        def rotate() -> None:
            qkv.grad = None
            tables.apply(qkv.permute(2, 0, 3, 1, 4)[0], 1).backward(upstream)

        return _using(variant, rotate)

    record: dict[str, Any] = {"model": model_name, "img_size": img_size, "batch": batch, "reps": reps,
                              "equal_bits": same, "results": {}}  # fmt: skip
    for name, make in {"train": train_step, "analysis": analysis_pass, "rotation": rotation}.items():
        print(f"{name}:", flush=True)
        times = bc.interleaved({v: make(v) for v in VARIANTS}, reps, warmup=2)
        value = bc.ratio(times["padded"], times["sliced"])
        result = {"ratio": value, "paired": bc.paired_ratio(times["padded"], times["sliced"]),
                  "cpu_ratio": bc.ratio(times.cpu["padded"], times.cpu["sliced"]), "timings": bc.all_stats(times)}  # fmt: skip
        if name != "rotation":
            result.update(goal=GOAL, verdict=bc.verdict(value, GOAL, higher_is_better=False))
        record["results"][name] = result
        print(f"  padded / sliced: {value:.3f} (paired {result['paired']:.3f}, CPU time {result['cpu_ratio']:.3f})"
              + (f", goal <= {GOAL}: {result['verdict']}" if "verdict" in result else ""), flush=True)  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return bc.model_size_main(NAME, __doc__, run, model="vit_tiny", img_size=32, batch=(8, 64), reps=(2, 15),
                              goal=f"padded / sliced <= {GOAL} (train step, analysis pass)", argv=argv)  # fmt: skip


if __name__ == "__main__":
    main()
