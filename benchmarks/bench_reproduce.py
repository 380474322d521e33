"""Wall time of ``peanchor reproduce``, end to end, in a fresh temporary directory.

    python3 benchmarks/bench_reproduce.py            # peanchor reproduce --preset smoke
    python3 benchmarks/bench_reproduce.py --full     # ... and the default `peanchor reproduce` (long)
    python3 benchmarks/bench_reproduce.py --quick    # smoke with two conditions only

Each run is a subprocess (``python -m peanchor``) with its own ``--out`` and its own
``PEANCHOR_CACHE`` (so the generated scenes data is part of the cost, as on a first run); nothing
here is compared, the times are recorded for the README. The run's exit code and whether
``results.json`` appeared are recorded too.
"""

from __future__ import annotations

import json
import os
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


def time_reproduce(label: str, extra: list[str], keep: bool = False) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix=f"peanchor-bench-{label}-"))
    out = tmp / "out"
    env = {**os.environ, "PEANCHOR_CACHE": str(tmp / "cache")}
    cmd = [sys.executable, "-m", "peanchor", "reproduce", *extra, "--out", str(out)]
    print(f"{label}: {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    entry: dict[str, Any] = {
        "command": "peanchor " + " ".join(cmd[3:]).replace(str(out), "OUT"),
        "wall_s": wall,
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
    print(
        f"  {wall:.1f} s, exit code {proc.returncode}, results.json {'written' if entry['results_json'] else 'missing'}"
    )
    if keep:
        entry["out"] = str(out)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    return entry


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    p.add_argument("--full", action="store_true", help="also time the default `peanchor reproduce` (long)")
    p.add_argument("--keep", action="store_true", help="keep the output directories")
    args = p.parse_args(argv)
    machine = bc.machine_info()
    runs = []
    if args.quick:
        runs.append(time_reproduce("smoke-quick", ["--preset", "smoke", "--conditions", "none,ape"], args.keep))
    else:
        runs.append(time_reproduce("smoke", ["--preset", "smoke"], args.keep))
        if args.full:
            runs.append(time_reproduce("default", [], args.keep))
    record = {
        "goal": "record wall times (no target)",
        "quick": args.quick,
        "runs": runs,
        "machine": bc.finish_machine_info(machine),
    }
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else "_full" if args.full else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
