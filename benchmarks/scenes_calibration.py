"""How the models of a ``scenes`` reproduce run read the two cues: texture and shape.

    python3 benchmarks/scenes_calibration.py runs/reproduce-cpu            # after `peanchor reproduce`
    python3 benchmarks/scenes_calibration.py runs/reproduce-cpu --images 1000

A calibration check for ``peanchor/data/scenes.py`` (see docs/scenes.md), not a speed benchmark. Every
glyph of ``scenes`` wears its class's texture with probability ``OWN_TEXTURE_P`` and has its class's
shape always. The generator can render counterfactual copies of the validation split that differ only in
the textures (``generate_scenes(own_texture_p=...)``), so each trained model is scored on:

- ``as designed``: the real validation split;
- ``own texture``: every glyph wears its class's texture (both cues agree);
- ``random texture``: every glyph wears a random texture (only the shape is informative).

``texture reliance`` = acc(own) − acc(random): near 0 for a model that reads the shape, large for one
that reads the texture. A model that ignores the texture scores the same on all three. Writes
``benchmarks/results/scenes_calibration.json`` (with ``--quick``: ``_quick``).

Imports: peanchor (checkpoint, data, results).
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_common import apply_threads, finish_machine_info, machine_info, parser, write_record  # noqa: E402

from peanchor.checkpoint.files import load_model  # noqa: E402
from peanchor.data import IMAGENET_MEAN, IMAGENET_STD, normalize, scenes  # noqa: E402
from peanchor.core.errors import DataError  # noqa: E402
from peanchor.results.records import RESULTS_JSON, read_results  # noqa: E402
from peanchor.training.config import load_config  # noqa: E402

SETS = {"as designed": scenes.OWN_TEXTURE_P, "own texture": 1.0, "random texture": 0.0}


@torch.inference_mode()
def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor, batch: int = 250) -> float:
    correct = 0
    for i in range(0, len(images), batch):
        logits = model(normalize(images[i : i + batch], IMAGENET_MEAN, IMAGENET_STD))  # (B, C)
        correct += int((logits.argmax(-1) == labels[i : i + batch]).sum())
    return correct / len(images)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("run", type=Path, help="a reproduce output directory (holds results.json and runs/)")
    p.add_argument("--images", type=int, default=2000, help="validation images per set")
    args = p.parse_args()
    apply_threads(args.threads)
    n = 200 if args.quick else args.images
    results = read_results(args.run / RESULTS_JSON)
    if results.dataset != "scenes":
        raise DataError(f"{args.run} is a {results.dataset} run; the calibration needs the scenes dataset")
    info = machine_info()
    size = int(results.img_size or 32)
    sets = {}
    for name, p_own in SETS.items():
        images, labels = scenes.generate_scenes(n, img_size=size, split="val", own_texture_p=p_own)
        sets[name] = (torch.from_numpy(images), torch.from_numpy(labels))
    rows = []
    for m in results.models:
        run_dir = Path(m.run_dir or args.run / "runs" / m.name)
        seed = load_config(run_dir / "config.yaml").data.seed
        if seed != 0:
            raise DataError(f"{run_dir} was trained on scenes seed {seed}; the calibration renders seed 0")
        model = load_model(run_dir).eval()
        acc = {name: accuracy(model, x, y) for name, (x, y) in sets.items()}
        rows.append({"model": m.name, "condition": m.condition, **acc,
                     "texture_reliance": acc["own texture"] - acc["random texture"]})  # fmt: skip
        print(f"{m.name:14s} " + "  ".join(f"{k} {v:.3f}" for k, v in acc.items())
              + f"  texture reliance {rows[-1]['texture_reliance']:+.3f}", flush=True)  # fmt: skip
    record = {"run": str(args.run), "images": n, "own_texture_p": scenes.OWN_TEXTURE_P, "models": rows,
              "machine": finish_machine_info(info)}  # fmt: skip
    if not args.no_write:
        write_record("scenes_calibration" + ("_quick" if args.quick else ""), record, args.out)


if __name__ == "__main__":
    main()
