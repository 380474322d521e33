"""Wall time and CPU use of ``peanchor reproduce``, end to end, in a fresh temporary directory.

    python3 benchmarks/bench_reproduce.py            # peanchor reproduce --preset smoke
    python3 benchmarks/bench_reproduce.py --demo     # ... and peanchor reproduce --preset demo (about 2 minutes)
    python3 benchmarks/bench_reproduce.py --full     # ... and the default `peanchor reproduce` (long)
    python3 benchmarks/bench_reproduce.py --quick    # smoke with two conditions only

CPU use is the user + system time of the command and every process it started (``resource.getrusage`` of the
children, which counts the worker processes once they are reaped) over the wall time: 200 % means two cores busy
from start to end (``cpu_s``, ``cpu_percent``).

Each run is a subprocess (``python -m peanchor``) with its own ``--out`` and its own
``PEANCHOR_CACHE`` (so the generated scenes data is part of the cost, as on a first run); the times are
recorded for the README. The run's exit code and whether ``results.json`` appeared are recorded too.

Then the same command again into the same ``--out``: a rerun of a finished grid, which does no work
(tests/study/test_reproduce.py checks that: nothing trained, analysed or written). Its wall time and its ratio
to the first run are recorded (``rerun_wall_s``, ``rerun_over_first``): what is left is process start-up,
imports, reading the cells' files and checking them (``--no-rerun`` skips it).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc

NAME = "reproduce"


def time_reproduce(label: str, extra: list[str], keep: bool = False, rerun: bool = True) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"peanchor-bench-{label}-"))
    out = tmp / "out"
    env = {**os.environ, "PEANCHOR_CACHE": str(tmp / "cache")}
    cmd = [sys.executable, "-m", "peanchor", "reproduce", *extra, "--out", str(out)]
    print(f"{label}: {' '.join(cmd[1:])}", flush=True)
    before = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    cpu = _children_cpu_s() - before
    entry: dict[str, Any] = {
        "command": "peanchor " + " ".join(cmd[3:]).replace(str(out), "OUT"),
        "wall_s": wall,
        "cpu_s": cpu,
        "cpu_percent": 100.0 * cpu / wall,
        "exit_code": proc.returncode,
        "results_json": (out / "results.json").is_file(),
    }
    if proc.returncode != 0:
        entry["stderr_tail"] = proc.stderr.strip().splitlines()[-3:]
    if entry["results_json"]:
        try:
            results = json.loads((out / "results.json").read_text())
            entry["conditions"] = list(results.get("conditions") or [])
            entry["models"] = len(results.get("models") or [])
            entry["failed"] = len(results.get("failed") or [])
            entry["compute_seconds"] = results.get("compute_seconds")
        except (ValueError, AttributeError):
            pass
    print(f"  {wall:.1f} s at {entry['cpu_percent']:.0f} % CPU ({cpu:.0f} s of CPU), exit code {proc.returncode}, "
          f"results.json {'written' if entry['results_json'] else 'missing'}")  # fmt: skip
    if rerun and proc.returncode == 0:
        t0 = time.perf_counter()
        again = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        entry["rerun_wall_s"] = time.perf_counter() - t0
        entry["rerun_exit_code"] = again.returncode
        entry["rerun_over_first"] = entry["rerun_wall_s"] / wall
        entry["rerun_nothing_to_do"] = "nothing to do" in again.stdout
        print(f"  rerun (no work): {entry['rerun_wall_s']:.1f} s, {entry['rerun_over_first']:.2f} of the first run, "
              f"exit code {again.returncode}")  # fmt: skip
    if keep:
        entry["out"] = str(out)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def _children_cpu_s() -> float:
    """User + system seconds of every reaped child process so far (a reproduce's workers included)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="also time the default `peanchor reproduce` (long)")
    p.add_argument("--demo", action="store_true", help="also time `peanchor reproduce --preset demo`")
    p.add_argument("--keep", action="store_true", help="keep the output directories")
    p.add_argument("--no-rerun", action="store_true", help="do not time the no-op rerun after each run")
    args = p.parse_args(argv)
    machine = bc.machine_info()
    runs = []
    if args.quick:
        quick = ["--preset", "smoke", "--conditions", "none,ape"]
        runs.append(time_reproduce("smoke-quick", quick, args.keep, not args.no_rerun))
    else:
        runs.append(time_reproduce("smoke", ["--preset", "smoke"], args.keep, not args.no_rerun))
        if args.demo:
            runs.append(time_reproduce("demo", ["--preset", "demo"], args.keep, not args.no_rerun))
        if args.full:
            runs.append(time_reproduce("default", [], args.keep, not args.no_rerun))
    record = {
        "goal": "record wall times (no target)",
        "quick": args.quick,
        "runs": runs,
        "machine": bc.finish_machine_info(machine),
    }
    if not args.no_write:
        suffix = "_quick" if args.quick else "_full" if args.full else "_demo" if args.demo else ""
        bc.write_record(NAME + suffix, record, args.out)
    return record


if __name__ == "__main__":
    main()
