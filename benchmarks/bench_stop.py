"""How soon a stopped `peanchor train` exits: seconds from SIGTERM/SIGINT to the end of the process, against one step.

    python3 benchmarks/bench_stop.py              # 3 stops per signal, smoke preset, 4096 images, batch 64
    python3 benchmarks/bench_stop.py --quick      # one SIGTERM, 1024 images

A stop is handled at the next step boundary: the step in flight finishes, the resume checkpoint is written, the
process exits with 128 + the signal (tests/core/test_interrupts.py checks all of that, and that the rerun is exact).
So the latency is about one step plus a checkpoint plus the interpreter's exit. Each repetition starts the run
in a fresh directory (``python -m peanchor``), waits until the first epoch is logged, sends the signal and waits
for the exit. The mean step time is the first epoch's training seconds (``metrics.csv``) over its steps; the
record's ratio is the median latency over that step time.
"""

from __future__ import annotations

import csv
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc

NAME = "stop"
HANG_GUARD = 600  # seconds to wait for the first epoch, and then for the exit


def stop_once(sig: int, images: int, batch: int, threads: int | None) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="peanchor-bench-stop-"))
    out = tmp / "run"
    env = {**os.environ, "PEANCHOR_CACHE": str(tmp / "cache")}
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    sets = [f"data.train_size={images}", "data.val_size=100", "train.epochs=3", f"train.batch_size={batch}"]
    cmd = [sys.executable, "-m", "peanchor", "train", "--preset", "smoke", "--no-progress", "--out", str(out)]
    cmd += [a for s in sets for a in ("--set", s)]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + HANG_GUARD
        log = out / "train.log"
        while not (log.exists() and "epoch 1/3" in log.read_text()):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the run ended or hung before its first epoch: {proc.stderr.read()[-2000:]}")
            time.sleep(0.01)
        t0 = time.perf_counter()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=HANG_GUARD)
        latency = time.perf_counter() - t0
        with open(out / "metrics.csv", newline="") as f:
            first = next(csv.DictReader(f))
        step = float(first["seconds"]) / (images // batch)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    entry = {"signal": signal.Signals(sig).name, "exit_code": proc.returncode, "latency_s": latency, "step_s": step}
    print(f"  {entry['signal']}: exit {proc.returncode} {latency:.2f} s after the signal; a step takes {step:.3f} s",
          flush=True)  # fmt: skip
    if proc.returncode != 128 + sig:
        entry["stderr_tail"] = err.strip().splitlines()[-3:]
    return entry


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3, help="stops per signal")
    p.add_argument("--images", type=int, default=4096, help="training images (smoke preset)")
    p.add_argument("--batch", type=int, default=64, help="training batch size")
    args = p.parse_args(argv)
    if args.quick:
        args.reps, args.images = 1, 1024
    machine = bc.machine_info()
    signals = [signal.SIGTERM] if args.quick else [signal.SIGTERM, signal.SIGINT]
    stops = [stop_once(sig, args.images, args.batch, args.threads) for _ in range(args.reps) for sig in signals]
    latency = [s["latency_s"] for s in stops]
    step = [s["step_s"] for s in stops]
    record = {
        "goal": "record (no target): seconds from the signal to the exit, and that over one step",
        "quick": args.quick,
        "images": args.images,
        "batch": args.batch,
        "stops": stops,
        "latency": bc.stats(latency),
        "step": bc.stats(step),
        "latency_over_step": bc.ratio(latency, step),
        "clean_exits": sum(s["exit_code"] == 128 + signal.Signals[s["signal"]] for s in stops),
        "machine": bc.finish_machine_info(machine),
    }
    print(f"median latency {record['latency']['median_s']:.2f} s = {record['latency_over_step']:.1f} steps; "
          f"{record['clean_exits']}/{len(stops)} clean exits")  # fmt: skip
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
