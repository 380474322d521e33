"""Cost of a sweep's doses through ``forward_doses`` against k + 1 plain forwards of the same model.

    python3 benchmarks/bench_doses.py            # vit_tiny with 12 blocks, rope, @ 32 px, batch 16, 3 reps
    python3 benchmarks/bench_doses.py --quick    # the same model, batch 4, 1 rep

Three sweeps of k doses over one batch (docs/interventions.md, "The cost of a sweep"), each timed side by side in
one run against ``plain``, k + 1 plain passes of the same model, and against ``separate``, the reference loop
(one ``forward_intermediates`` call per intervention: a ``patch`` dose runs its donor pass each time). Every pass
returns the logits and every block's tokens, as an analysis asks for them; eval mode, ``torch.inference_mode``.

* ``head_ablate``: ``head_ablate:layers=k`` (every head) for k = 0 .. 11 on the clean base: each dose starts at
  block k from the base's residual. Goal: doses / plain <= 0.62 (the blocks run: 12 + 78 of 13 × 12 = 0.58).
* ``patch``: the clean residual of block k patched into an RPI pass, k = 0 .. 11: the donor pass (the clean pass)
  runs once, each dose starts at block k. Goal <= 0.70 (blocks: 12 + 12 + 78 of 156 = 0.65).
* ``rope_planes``: ``rope_planes:freqs=0-j``, j = 0 .. 11 (the fastest planes of each axis, every block): the
  doses edit every block's table, so each runs from the input. Goal <= 1.05 (k + 1 passes, the work shared).

Equality checks, which the smoke test keeps: every sweep's outputs equal the separate calls' bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch

from peanchor.interventions import Intervention, random_permutation
from peanchor.interventions.doses import forward_doses
from peanchor.models import create_model

NAME = "doses"
DEPTH = 12
GOALS = {"head_ablate": 0.62, "patch": 0.70, "rope_planes": 1.05}


def sweeps(model: torch.nn.Module) -> dict[str, tuple[Intervention, list[Intervention]]]:
    """name → (base, doses)."""
    perm = random_permutation(model.num_patches, generator=torch.Generator().manual_seed(0))
    rpi = Intervention(perm)
    per_axis = sum(1 for p in model.hook_points.planes if p.axis == "x")
    return {
        "head_ablate": (Intervention(), [Intervention.parse(f"head_ablate:layers={k}") for k in range(model.depth)]),
        "patch": (rpi, [rpi.with_edits(*Intervention.parse(f"patch:site=residual,layer={k},donor=clean").edits)
                        for k in range(model.depth)]),
        "rope_planes": (Intervention(), [Intervention.parse(f"rope_planes:freqs=0-{j}")
                                         for j in range(min(DEPTH, per_axis))]),
    }  # fmt: skip


def run(model_name: str, img_size: int, batch: int, reps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = create_model(model_name, pe="rope", num_classes=10, img_size=img_size, depth=DEPTH).eval()
    x = torch.randn(batch, 3, img_size, img_size, generator=torch.Generator().manual_seed(1))
    print(f"{model_name} with {model.depth} blocks, rope, @ {img_size} px ({model.grid[0]}x{model.grid[1]} patches), "
          f"batch {batch}, {reps} reps", flush=True)  # fmt: skip
    record: dict[str, Any] = {"model": model_name, "img_size": img_size, "batch": batch, "reps": reps,
                              "layers": model.depth, "tokens": model.num_patches, "sweeps": {}}  # fmt: skip
    for name, (base, doses) in sweeps(model).items():
        out: dict[str, list[Any]] = {}

        def call_doses(base: Intervention = base, doses: list[Intervention] = doses) -> None:
            with torch.inference_mode():
                first, rest = forward_doses(model, x, base, doses)
                out["doses"] = [first, *rest]

        def call_separate(base: Intervention = base, doses: list[Intervention] = doses) -> None:
            with torch.inference_mode():
                out["separate"] = [model.forward_intermediates(x, iv) for iv in (base, *doses)]

        def call_plain(base: Intervention = base, k: int = len(doses)) -> None:
            plain = Intervention(base.token_perm, base.pe_scale)
            with torch.inference_mode():
                for _ in range(k + 1):
                    model.forward_intermediates(x, plain)

        print(f"{name}: {len(doses)} doses", flush=True)
        times = bc.interleaved({"doses": call_doses, "plain": call_plain, "separate": call_separate}, reps=reps)
        for i, (a, b) in enumerate(zip(out["doses"], out["separate"])):
            if not (torch.equal(a.logits, b.logits) and torch.equal(a.tokens, b.tokens)):
                raise AssertionError(f"{name}: forward_doses differs from the separate call of intervention {i}")
        ratio = bc.ratio(times["doses"], times["plain"])
        result = {
            "doses": len(doses), "times": bc.all_stats(times), "ratio": ratio,
            "ratio_paired": bc.paired_ratio(times["doses"], times["plain"]),
            "ratio_cpu": bc.ratio(times.cpu["doses"], times.cpu["plain"]),
            "separate_over_plain": bc.ratio(times["separate"], times["plain"]),
            "goal": GOALS[name], "verdict": bc.verdict(ratio, GOALS[name], False), "equal_to_separate": True,
        }  # fmt: skip
        record["sweeps"][name] = result
        print(f"  {name}: doses / {len(doses) + 1} plain = {ratio:.3f} (paired {result['ratio_paired']:.3f}, CPU time "
              f"{result['ratio_cpu']:.3f}; goal <= {GOALS[name]}) -> {result['verdict']}; separate / plain = "
              f"{result['separate_over_plain']:.3f}", flush=True)  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    goal = ", ".join(f"{k} doses / plain <= {v}" for k, v in GOALS.items())
    return bc.model_size_main(NAME, __doc__, run, model="vit_tiny", img_size=32, batch=(4, 16), reps=(1, 3), goal=goal,
                              argv=argv)


if __name__ == "__main__":
    main()
