"""How long ``peanchor.audit`` takes on a 12-block ViT-B/16 at 224 px on one CPU core (the issue's target: 30 s).

    python3 benchmarks/bench_audit.py              # peanchor ViT-B (ape, rope) and timm vit_base_patch16_224, 1 thread
    python3 benchmarks/bench_audit.py --quick      # vit_micro only (a sanity run)

Each model is random (no download); every check runs, and the seconds of each are recorded with the total
(``check_seconds``; the four slowest are printed). The
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
    start = time.perf_counter()
    report = audit(model)
    total = time.perf_counter() - start
    return {"seconds": round(total, 2), "passed": report.passed,
            "checks": {c.name: c.status for c in report.checks},
            "check_seconds": {k: round(v, 2) for k, v in report.timings.items()}}  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = bc.parser(__doc__.splitlines()[0])
    args = p.parse_args(argv)
    bc.apply_threads(args.threads or 1)
    machine = bc.machine_info()
    runs = {}
    for name, build in models(args.quick).items():
        runs[name] = audit_once(build)
        slowest = sorted(runs[name]["check_seconds"].items(), key=lambda kv: -kv[1])[:4]
        print(f"{name}: {runs[name]['seconds']:.1f} s, passed={runs[name]['passed']}; slowest: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in slowest))
    worst = max(r["seconds"] for r in runs.values())
    record = {
        "goal": f"every model audited in <= {GOAL_S:g} s on one core",
        "quick": args.quick,
        "runs": runs,
        "worst_s": worst,
        "verdict": bc.verdict(worst, GOAL_S, higher_is_better=False),
        "machine": bc.finish_machine_info(machine),
    }
    if not args.no_write:
        bc.write_record(NAME + ("_quick" if args.quick else ""), record, args.out)
    return record


if __name__ == "__main__":
    main()
