"""The analysis with its intervals (RPI per image, the groups bootstrap) against the analysis before them (RPI per
forward call, no bootstrap), side by side in one run.

    python3 benchmarks/bench_intervals.py                 # scenes 32 px, 1000 images, cpu-preset-sized APE model
    python3 benchmarks/bench_intervals.py --quick         # 300 images, 1 rep

Both arms are :func:`peanchor.analysis.evaluate.evaluate_model` with the defaults (every lens, both paper shifts,
the α sweep over 11 values) on the same model and images, each with a fresh corruption cache; they differ only in
``rpi_mode`` and ``bootstrap`` (the old arm: ``per_call``, 0; the new: ``per_image``, 200 replicates of 50 groups).
The repetitions interleave the two arms (bench_common.interleaved).

Goal: new / old <= 1.10 (issue 35: the intervals may cost at most 10 % more).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc
import torch
from bench_eval_suite import cpu_preset_model

from peanchor.analysis.corrupted_sets import CorruptedCache
from peanchor.analysis.evalset import EvalSet
from peanchor.analysis.evaluate import evaluate_model
from peanchor.analysis.plan import resolve_plan
from peanchor.data import DataSpec

NAME = "intervals"
GOAL = 1.10
BATCH = 256
ARMS = {"old": {"rpi_mode": "per_call", "bootstrap": 0}, "new": {"rpi_mode": "per_image", "bootstrap": 200}}


def run(num_images: int, reps: int, pe: str = "ape") -> dict[str, Any]:
    evalset = EvalSet.from_spec(DataSpec(name="scenes", img_size=32, val_size=num_images), progress=False)
    torch.manual_seed(0)
    model = cpu_preset_model(evalset.info.num_classes, pe).eval()
    print(f"intervals: scenes 32 px, {len(evalset)} images, pe={pe}, batch {BATCH}, {reps} reps", flush=True)
    results: dict[str, list[Any]] = {arm: [] for arm in ARMS}

    def arm(name: str) -> Any:
        def analyse() -> None:
            plan = resolve_plan(evalset.img_size, given={"batch_size": BATCH, **ARMS[name]})
            results[name].append(evaluate_model(model, evalset, plan, info=evalset.info, device="cpu", progress=False,
                                                cache=CorruptedCache(progress=False)))  # fmt: skip

        return analyse

    times = bc.interleaved({name: arm(name) for name in ARMS}, reps=reps, warmup=0)
    new, old = results["new"][-1], results["old"][-1]
    record: dict[str, Any] = {
        "num_images": len(evalset), "pe": pe, "batch": BATCH, "reps": reps, "arms": ARMS,
        "forward_passes": {"old": old.forward_passes, "new": new.forward_passes},
        "times": bc.all_stats(times),
        "ratio": bc.median(times["new"]) / bc.median(times["old"]),
        "ratio_paired": bc.paired_ratio(times["new"], times["old"]),
        "ratio_cpu_time": bc.median(times.cpu["new"]) / bc.median(times.cpu["old"]),
        "new_has_intervals": new.clean_acc_ci is not None and new.ssdc.rpi_ci is not None,
    }  # fmt: skip
    record["verdict"] = bc.verdict(record["ratio"], GOAL, False)
    print(f"  passes old {old.forward_passes}, new {new.forward_passes}; old {bc.median(times['old']):.2f} s, new "
          f"{bc.median(times['new']):.2f} s: ratio {record['ratio']:.3f} (paired {record['ratio_paired']:.3f}, "
          f"cpu {record['ratio_cpu_time']:.3f}; goal <= {GOAL}) -> {record['verdict']}")  # fmt: skip
    return record


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--images", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--pe", default="ape")
    args = p.parse_args(argv)
    bc.apply_threads(args.threads)
    machine = bc.machine_info()
    record = run(args.images or (300 if args.quick else 1000), args.reps or (1 if args.quick else 3), args.pe)
    record.update(goal=f"new / old <= {GOAL}", quick=args.quick, machine=bc.finish_machine_info(machine))
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
