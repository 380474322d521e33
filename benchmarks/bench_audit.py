"""How long ``peanchor.audit`` takes on a 12-block ViT-B/16 at 224 px on one CPU core (the issue's target: 30 s).

    python3 benchmarks/bench_audit.py              # peanchor ViT-B (ape, rope) and timm vit_base_patch16_224, 1 thread
    python3 benchmarks/bench_audit.py --quick      # vit_micro only (a sanity run)

Each model is random (no download); every check runs, and the seconds of each are recorded with the total
(``check_seconds``; all are printed, slowest first), and the process's CPU seconds: on one thread that is what the audit
would take on an idle core, whatever the others on a shared machine do. The
machine's load at the start and end is in the record: on a shared machine the wall time includes the others' work.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_common as bc

NAME = "bench_audit"
GOAL_S = 30.0


def models(quick: bool) -> dict[str, Any]:
    import peanchor

    if quick:
        return {"peanchor vit_micro ape": lambda: peanchor.create_model("vit_micro", pe="ape", num_classes=10)}
    vit_b = dict(embed_dim=768, depth=12, num_heads=12)
    out = {f"peanchor ViT-B/16 {pe}": (lambda pe=pe: peanchor.create_model("vit_small", pe=pe, num_classes=1000,
                                                                           drop_path_rate=0.0, **vit_b))
           for pe in ("ape", "rope")}  # fmt: skip
    try:
        from peanchor.adapters import load_timm_model

        out["timm vit_base_patch16_224"] = lambda: load_timm_model("vit_base_patch16_224")
    except ImportError:  # pragma: no cover
        pass
    return out


def audit_once(build: Any) -> dict[str, Any]:
    from peanchor.audit import audit

    model = build().eval()
    start, cpu = time.perf_counter(), time.process_time()
    report = audit(model)
    total, cpu = time.perf_counter() - start, time.process_time() - cpu
    return {"seconds": round(total, 2), "cpu_seconds": round(cpu, 2), "passed": report.passed,
            "checks": {c.name: c.status for c in report.checks},
            "check_seconds": {k: round(v, 2) for k, v in report.timings.items()}}  # fmt: skip


TINY = ["vit_small_patch16_224", "img_size=32", "patch_size=8", "depth=1", "embed_dim=64", "num_heads=4"]


def cli_overhead(repeats: int = 3) -> dict[str, Any]:
    """What the command line adds to ``peanchor.audit``: the same tiny timm audit as ``python -m peanchor audit``
    and as ``python -c`` calling ``peanchor.audit``, alternated, each a fresh process; the median of each."""
    import os
    import statistics
    import subprocess

    args = " ".join(f"--timm-arg {a}" for a in TINY[1:])
    cli = [sys.executable, "-m", "peanchor", "audit", "--timm", TINY[0], *args.split()]
    kwargs = ", ".join(f"{k}={v}" for k, v in (a.split("=") for a in TINY[1:]))
    api = [sys.executable, "-c", "import peanchor; from peanchor.adapters import load_timm_model; "
           f"print(peanchor.audit(load_timm_model('{TINY[0]}', {kwargs})).passed)"]  # fmt: skip
    times: dict[str, list[float]] = {"cli": [], "api": []}
    for _ in range(repeats):
        for key, command in (("cli", cli), ("api", api)):
            start = time.perf_counter()
            subprocess.run(command, check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            times[key].append(time.perf_counter() - start)
    cli_s, api_s = statistics.median(times["cli"]), statistics.median(times["api"])
    return {"cli_s": round(cli_s, 2), "api_s": round(api_s, 2), "cli_adds_s": round(cli_s - api_s, 2)}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    bc.apply_threads(args.threads or 1)
    machine = bc.machine_info()
    runs = {}
    for name, build in models(args.quick).items():
        runs[name] = audit_once(build)
        slowest = sorted(runs[name]["check_seconds"].items(), key=lambda kv: -kv[1])
        print(f"{name}: {runs[name]['seconds']:.1f} s wall, {runs[name]['cpu_seconds']:.1f} s CPU (one thread: the "
              f"wall time on an idle core), passed={runs[name]['passed']}; per check (wall): "
              + ", ".join(f"{k} {v:.2f} s" for k, v in slowest))
    worst = max(r["cpu_seconds"] for r in runs.values())
    startup = None if args.quick else cli_overhead()
    if startup:
        print(f"the command line adds {startup['cli_adds_s']:.2f} s ({startup['cli_s']:.2f} s against "
              f"{startup['api_s']:.2f} s through peanchor.audit, medians of 3 fresh processes each)")
    record = {
        "goal": f"every model audited in <= {GOAL_S:g} s on one core",
        "quick": args.quick,
        "runs": runs,
        "worst_s": worst,  # CPU seconds of the slowest model's audit on one thread
        "cli_startup": startup,
        "verdict": bc.verdict(worst, GOAL_S, higher_is_better=False),
        "machine": bc.finish_machine_info(machine),
    }
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
