"""Cost of an edited pass (docs/interventions.md) against the plain pass of the same model.

    python3 benchmarks/bench_interventions.py            # vit_tiny @ 32 px, batch 64
    python3 benchmarks/bench_interventions.py --quick    # vit_tiny @ 32 px, batch 8, 2 reps

One ``forward_intermediates(x, intervention, layers=0)`` call per candidate, eval mode, ``torch.inference_mode``,
interleaved repetitions. For an ``ape`` model: ``plain``, ``pe_zero``, ``pe_shuffle``, ``head_ablate`` (every head
of the middle block), ``patch`` (the clean residual of the middle block into an RPI pass: a donor pass, then the
pass); for a ``rope`` model of the same weights: ``plain_rope`` and ``rope_planes`` (the four fastest planes of
each axis in every block).

Goals: every edit but ``patch`` costs at most 1.1 plain passes, ``patch`` at most 2.1 (its donor pass is a second
forward; sharing donors across the doses of a sweep is a later round). Equality checks, which the smoke test keeps:
an identity edit (``head_ablate:heads=none``) is the plain pass bit for bit, and ``patch`` gives the clean logits.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch

from peanchor.interventions import Intervention, random_permutation
from peanchor.models import create_model

NAME = "interventions"
GOAL = 1.1
PATCH_GOAL = 2.1


def run(model_name: str, img_size: int, batch: int, reps: int) -> dict[str, Any]:
    torch.manual_seed(0)
    ape = create_model(model_name, pe="ape", num_classes=10, img_size=img_size).eval()
    rope = create_model(model_name, pe="rope", num_classes=10, img_size=img_size).eval()
    rope.load_state_dict({k: v for k, v in ape.state_dict().items() if not k.startswith("pe.")})
    x = torch.randn(batch, 3, img_size, img_size, generator=torch.Generator().manual_seed(1))
    perm = random_permutation(ape.num_patches, generator=torch.Generator().manual_seed(0))
    middle = ape.depth // 2
    edits = {
        "pe_zero": (ape, Intervention.parse("pe_zero")),
        "pe_shuffle": (ape, Intervention.parse("pe_shuffle:seed=1")),
        "head_ablate": (ape, Intervention.parse(f"head_ablate:layers={middle}")),
        "patch": (ape, Intervention.parse(f"patch:site=residual,layer={middle}", token_perm=perm)),
        "rope_planes": (rope, Intervention.parse("rope_planes:freqs=0-3")),
    }
    print(f"{model_name} @ {img_size} px ({ape.grid[0]}x{ape.grid[1]} patches, {ape.depth} layers), batch {batch}, "
          f"{reps} reps", flush=True)  # fmt: skip
    out: dict[str, torch.Tensor] = {}

    def candidate(name: str, model: torch.nn.Module, intervention: Intervention):  # type: ignore[no-untyped-def]
        def call() -> None:
            with torch.inference_mode():
                out[name] = model.forward_intermediates(x, intervention, layers=0).logits

        return call

    candidates = {"plain": candidate("plain", ape, Intervention()),
                  "plain_rope": candidate("plain_rope", rope, Intervention())}  # fmt: skip
    candidates.update({name: candidate(name, model, iv) for name, (model, iv) in edits.items()})
    times = bc.interleaved(candidates, reps=reps, warmup=1)
    with torch.inference_mode():
        identity = ape.forward_intermediates(x, Intervention.parse("head_ablate:heads=none"), layers=0).logits
    if not torch.equal(identity, out["plain"]):
        raise AssertionError("head_ablate:heads=none is not the plain pass bit for bit")
    if not torch.equal(out["patch"], out["plain"]):
        raise AssertionError("the clean residual patched into the RPI pass does not give the clean logits")
    base = {name: "plain_rope" if name == "rope_planes" else "plain" for name in edits}
    ratios = {name: bc.ratio(times[name], times[base[name]]) for name in edits}
    paired = {name: bc.paired_ratio(times[name], times[base[name]]) for name in edits}
    goals = {name: PATCH_GOAL if name == "patch" else GOAL for name in edits}
    record: dict[str, Any] = {
        "model": model_name, "img_size": img_size, "batch": batch, "reps": reps, "layers": ape.depth,
        "tokens": ape.num_patches, "times": bc.all_stats(times), "ratios": ratios, "ratios_paired": paired,
        "goals": goals, "verdicts": {name: bc.verdict(ratios[name], goals[name], False) for name in edits},
        "identity_equal": True, "patch_gives_clean_logits": True,
    }  # fmt: skip
    for name in edits:
        print(f"  {name} / plain = {ratios[name]:.3f} (paired {paired[name]:.3f}; goal <= {goals[name]}) -> "
              f"{record['verdicts'][name]}")  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return bc.model_size_main(NAME, __doc__, run, model="vit_tiny", img_size=32, batch=(8, 64), reps=(2, 7),
                              goal=f"edit / plain <= {GOAL}; patch / plain <= {PATCH_GOAL}", argv=argv)  # fmt: skip


if __name__ == "__main__":
    main()
