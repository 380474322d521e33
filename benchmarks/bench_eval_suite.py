"""The full evaluation suite for one model vs the forward passes it reports, measured in the same run.

    python3 benchmarks/bench_eval_suite.py                 # scenes 32 px, 1000 images, cpu-preset-sized APE model
    python3 benchmarks/bench_eval_suite.py --images 2000   # the full cpu-preset evaluation set
    python3 benchmarks/bench_eval_suite.py --quick         # 300 images, 1 rep

The suite is :func:`peanchor.analysis.evaluate.evaluate_model` with the defaults: SSDC (normal and
under RPI), both paper shifts, and the α sweep over 11 values (the model has a learned APE, so the
sweep runs). It reports how many passes over the set it made (``forward_passes``; a pass that stops
after two blocks for ΔSSDC counts as one). The baseline is one plain pass, ``model(normalize(x))``
over the same set and batch size in ``torch.inference_mode``, timed interleaved with the suite.

Each suite run gets a fresh corruption cache, so corrupting the set (JPEG, blur) is included: what
one ``analyze`` of one model costs. The suite's own breakdown (``timing.passes``) gives the ratio
without corruption too, as for every model after the first in ``reproduce`` (shared cache). The
plain pass is repeated 3 times per repetition (it is short next to the suite).

Goal: suite seconds / (forward_passes x plain pass seconds) <= 1.3.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import resolve_plan
from peanchor.data import DataSpec, normalize
from peanchor.models import create_model
from peanchor.presets.catalog import preset_config

NAME = "eval_suite"
GOAL = 1.3
BATCH = 256


def cpu_preset_model(num_classes: int, pe: str) -> torch.nn.Module:
    """The model of ``--preset cpu`` (the prototype size of docs/study.md), untrained: timing does not need weights."""
    m = preset_config("cpu").model
    return create_model(m.name, pe=pe, num_classes=num_classes, img_size=32, patch_size=m.patch_size, **m.overrides)


def run(num_images: int, reps: int, pe: str = "ape") -> dict[str, Any]:
    evalset = EvalSet.from_spec(DataSpec(name="scenes", img_size=32, val_size=num_images), progress=False)
    info = evalset.info
    torch.manual_seed(0)
    model = cpu_preset_model(info.num_classes, pe).eval()
    print(f"eval suite: scenes 32 px, {len(evalset)} images, pe={pe}, batch {BATCH}, {reps} reps", flush=True)
    results: dict[str, Any] = {}
    plain_repeats = 3

    def suite() -> None:
        results.setdefault("suite", []).append(
            evaluate_model(
                model,
                evalset,
                resolve_plan(evalset.img_size, given={"batch_size": BATCH}),
                info=info,
                device="cpu",
                progress=False,
                cache=CorruptedCache(progress=False),
            )
        )

    def plain_passes() -> None:
        with torch.inference_mode():
            for _ in range(plain_repeats):
                for start in range(0, len(evalset), BATCH):
                    x = normalize(evalset.images[start : start + BATCH], info.mean, info.std)  # (B, 3, S, S)
                    model(x)  # (B, C)

    times = bc.interleaved({"suite": suite, "plain_pass_x3": plain_passes}, reps=reps, warmup=0)
    last = results["suite"][-1]
    passes = last.forward_passes
    plain = bc.median(times["plain_pass_x3"]) / plain_repeats
    plain_cpu = bc.median(times.cpu["plain_pass_x3"]) / plain_repeats
    suite_s = bc.median(times["suite"])
    passes_only = bc.median([r.timing["passes"] for r in results["suite"]])
    corrupt = bc.median([r.timing["corrupt"] for r in results["suite"]])
    record: dict[str, Any] = {
        "num_images": len(evalset),
        "pe": pe,
        "batch": BATCH,
        "reps": reps,
        "model_args": model.model_args,
        "forward_passes": passes,
        "passes": last.passes,
        "alphas": last.settings.alphas,
        "shifts": last.shifts,
        "times": bc.all_stats(times),
        "plain_pass_s": plain,
        "suite_s": suite_s,
        "suite_reported_seconds": [r.seconds for r in results["suite"]],
        "suite_corrupt_s": corrupt,
        "suite_passes_s": passes_only,
        "budget_s": passes * plain,
        "ratio": suite_s / (passes * plain),
        "ratio_without_corruption": passes_only / (passes * plain),
        "ratio_paired": bc.paired_ratio(times["suite"], [t * passes / plain_repeats for t in times["plain_pass_x3"]]),
        "ratio_of_min": min(times["suite"]) / (passes * min(times["plain_pass_x3"]) / plain_repeats),
        "ratio_cpu_time": bc.median(times.cpu["suite"]) / (passes * plain_cpu),
    }
    record["verdict"] = bc.verdict(record["ratio"], GOAL, False)
    print(f"  {passes} passes ({last.passes}); plain pass {plain:.3f} s -> budget {passes * plain:.2f} s")
    print(
        f"  suite {suite_s:.2f} s (corruption {corrupt:.2f} s): ratio {record['ratio']:.3f} (goal <= {GOAL}) -> "
        f"{record['verdict']} (paired {record['ratio_paired']:.3f}); without corruption "
        f"{record['ratio_without_corruption']:.3f}"
    )
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--pe", default="ape")
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    record = run(args.images or (300 if args.quick else 1000), args.reps or (1 if args.quick else 2), args.pe)
    record.update(
        goal=f"suite / (forward_passes x plain pass) <= {GOAL}",
        quick=args.quick,
        machine=bc.finish_machine_info(machine),
    )
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
