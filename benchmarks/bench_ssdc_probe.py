"""Cost of the lenses: streaming SSDC over every layer, and all three lenses in one pass, vs a plain forward pass.

    python3 benchmarks/bench_ssdc_probe.py            # vit_paper @ 224 px, batch 32
    python3 benchmarks/bench_ssdc_probe.py --quick    # vit_paper @ 224 px, batch 8, 2 reps

Five candidates per batch, eval mode, ``torch.inference_mode``, interleaved repetitions:

* ``forward``: ``model(x)``, the baseline;
* ``probe``: ``acc.update(model.spatial_tokens(x))`` then ``acc.compute()`` (peanchor's SSDC);
* ``lenses``: what the evaluation suite does in a full probed pass: ``model.forward_with_tokens(x, attention=...)``
  with the attention-distance accumulator as the sink (the weights recomputed beside SDPA, reduced per block),
  then the SSDC and position-probe accumulators updated with the tokens, and all three computed;
* ``tokens``: ``model.forward_with_tokens(x)`` alone, to tell the lenses' own cost from the full pass's;
* ``paper``: the reference code's approach: forward hooks copy every block's LN1 output to the CPU
  as numpy during ``model(x)``; then, per layer, the cosine-similarity matrix of each image is
  computed and averaged over the images, and ``scipy.stats.spearmanr`` of the mean matrix's
  upper triangle against ``-D`` gives the SSDC per layer.

Goals: probe / forward <= 1.15 and lenses / forward <= 1.3. The paper approach's ratio is reported too. The
SSDC estimates of ``probe``, ``lenses`` and ``paper`` are checked equal (they compute the same quantity).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import numpy as np
import torch

from peanchor.metrics import SSDCAccumulator, grid_distances
from peanchor.metrics.attention_distance import AttentionDistanceAccumulator
from peanchor.metrics.position_probe import PositionProbeAccumulator, heldout_mask
from peanchor.models import create_model

NAME = "ssdc_probe"
GOAL = 1.15
LENSES_GOAL = 1.3
TOLERANCE = 1e-4  # float32 similarities summed in a different order may swap near-tied ranks


class PaperProbe:
    """Forward hooks on every block's LN1 that keep the patch tokens as numpy arrays (paper style)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.model = model
        self.outputs: list[list[np.ndarray]] = [[] for _ in model.blocks]
        self.handles = [block.norm1.register_forward_hook(self._hook(i)) for i, block in enumerate(model.blocks)]

    def _hook(self, layer: int) -> Any:
        def hook(module: torch.nn.Module, inputs: Any, output: torch.Tensor) -> None:
            self.outputs[layer].append(output[:, 1:].detach().cpu().numpy())  # (B, N, D), CLS dropped

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

    def ssdc(self, grid: tuple[int, int]) -> np.ndarray:
        """Per layer: mean over images of the per-image cosine similarity, then scipy's Spearman vs -D."""
        from scipy.stats import spearmanr

        dist = grid_distances(grid).numpy()  # (N, N)
        iu = np.triu_indices(dist.shape[0], k=1)
        values = []
        for layer_batches in self.outputs:
            tokens = np.concatenate(layer_batches)  # (B, N, D)
            total = np.zeros((tokens.shape[1], tokens.shape[1]), dtype=np.float64)
            for image in tokens:  # per image, as the reference code
                unit = image / np.maximum(np.linalg.norm(image, axis=-1, keepdims=True), 1e-12)
                total += unit @ unit.T  # (N, N)
            mean = total / tokens.shape[0]
            values.append(spearmanr(-dist[iu], mean[iu])[0])
        return np.asarray(values)


def run(model_name: str, img_size: int, batch: int, reps: int, pe: str = "ape") -> dict[str, Any]:
    torch.manual_seed(0)
    model = create_model(model_name, pe=pe, num_classes=100, img_size=img_size).eval()
    grid = model.grid
    x = torch.randn(batch, 3, img_size, img_size, generator=torch.Generator().manual_seed(1))
    print(
        f"{model_name} @ {img_size} px ({grid[0]}x{grid[1]} patches, {model.depth} layers), batch {batch}, {reps} reps",
        flush=True,
    )
    results: dict[str, Any] = {}

    def forward() -> None:
        with torch.inference_mode():
            model(x)

    def probe() -> None:
        with torch.inference_mode():
            acc = SSDCAccumulator(grid)
            acc.update(model.spatial_tokens(x))  # (B, L, N, D)
            results["probe"] = acc.compute()

    heldout = heldout_mask(batch, seed=0) if batch >= 2 else torch.zeros(batch, dtype=torch.bool)

    def lenses() -> None:
        with torch.inference_mode():
            ssdc_acc = SSDCAccumulator(grid)
            attention = AttentionDistanceAccumulator(grid, model.num_prefix)
            position = PositionProbeAccumulator(grid)
            _, tokens = model.forward_with_tokens(x, attention=attention)  # (B, C), (B, L, N, D)
            ssdc_acc.update(tokens)
            position.update(tokens, heldout)
            results["lenses"] = ssdc_acc.compute()
            results["attention"] = attention.compute()["manhattan"]  # (L, H)
            results["position"] = position.compute() if 0 < int(heldout.sum()) < batch else None  # (L, 2)

    def tokens_only() -> None:
        with torch.inference_mode():
            model.forward_with_tokens(x)

    def paper_style() -> None:
        hooked = PaperProbe(model)
        try:
            with torch.inference_mode():
                model(x)
            results["paper"] = hooked.ssdc(grid)
        finally:
            hooked.remove()

    candidates = {"forward": forward, "probe": probe, "lenses": lenses, "tokens": tokens_only, "paper": paper_style}
    times = bc.interleaved(candidates, reps=reps, warmup=1)
    ours = results["probe"].numpy()
    theirs = results["paper"]
    max_diff = float(max(np.max(np.abs(ours - theirs)), np.max(np.abs(results["lenses"].numpy() - theirs))))
    record: dict[str, Any] = {
        "model": model_name,
        "pe": pe,
        "img_size": img_size,
        "batch": batch,
        "reps": reps,
        "layers": model.depth,
        "tokens": model.num_patches,
        "times": bc.all_stats(times),
        "ratio_probe": bc.ratio(times["probe"], times["forward"]),
        "ratio_paper": bc.ratio(times["paper"], times["forward"]),
        "ratio_probe_of_min": bc.ratio_of_min(times["probe"], times["forward"]),
        "ratio_probe_paired": bc.paired_ratio(times["probe"], times["forward"]),
        "ratio_paper_paired": bc.paired_ratio(times["paper"], times["forward"]),
        "ratio_paper_of_min": bc.ratio_of_min(times["paper"], times["forward"]),
        "ratio_probe_cpu_time": bc.ratio(times.cpu["probe"], times.cpu["forward"]),
        "ratio_paper_cpu_time": bc.ratio(times.cpu["paper"], times.cpu["forward"]),
        "ratio_lenses": bc.ratio(times["lenses"], times["forward"]),
        "ratio_lenses_paired": bc.paired_ratio(times["lenses"], times["forward"]),
        "ratio_lenses_of_min": bc.ratio_of_min(times["lenses"], times["forward"]),
        "ratio_lenses_cpu_time": bc.ratio(times.cpu["lenses"], times.cpu["forward"]),
        "ratio_tokens": bc.ratio(times["tokens"], times["forward"]),
        "ratio_lenses_over_tokens": bc.ratio(times["lenses"], times["tokens"]),
        "ssdc_probe": ours.tolist(),
        "ssdc_paper": theirs.tolist(),
        "attention_distance": results["attention"].tolist(),
        "probe_r2": results["position"].tolist() if results["position"] is not None else None,
        "max_abs_diff": max_diff,
        "equal_within": TOLERANCE,
    }
    record["verdict"] = bc.verdict(record["ratio_probe"], GOAL, False)
    record["verdict_lenses"] = bc.verdict(record["ratio_lenses"], LENSES_GOAL, False)
    if not max_diff <= TOLERANCE:
        raise AssertionError(f"SSDC from the probe and from the paper-style hooks differ by {max_diff:g}")
    print(
        f"  probe / forward = {record['ratio_probe']:.3f} (goal <= {GOAL}) -> {record['verdict']} "
        f"(paired {record['ratio_probe_paired']:.3f}, CPU time {record['ratio_probe_cpu_time']:.3f}); "
        f"paper-style / forward = {record['ratio_paper']:.3f} (paired {record['ratio_paper_paired']:.3f}); "
        f"SSDC max |diff| {max_diff:.2e}"
    )
    print(
        f"  lenses / forward = {record['ratio_lenses']:.3f} (goal <= {LENSES_GOAL}) -> {record['verdict_lenses']} "
        f"(paired {record['ratio_lenses_paired']:.3f}, CPU time {record['ratio_lenses_cpu_time']:.3f}); "
        f"forward_with_tokens alone / forward = {record['ratio_tokens']:.3f}"
    )
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--model", default="vit_paper")
    p.add_argument("--img-size", type=int, default=224)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    batch = args.batch or (8 if args.quick else 32)
    reps = args.reps or (2 if args.quick else 7)
    record = run(args.model, args.img_size, batch, reps)
    record.update(goal=f"probe / forward <= {GOAL}; lenses / forward <= {LENSES_GOAL}", quick=args.quick,
                  machine=bc.finish_machine_info(machine))  # fmt: skip
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
