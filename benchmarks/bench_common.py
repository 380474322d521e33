"""Shared helpers for the benchmarks: interleaved timing, medians, machine notes, JSON records.

Every benchmark compares things *side by side in one process*: repetition ``r`` runs each
candidate once, in an order that rotates with ``r``, so a burst of load from another process hits
all candidates alike. Results are medians over repetitions; the ratios between medians are what the
benchmarks report. Each script writes ``benchmarks/results/<name>.json`` atomically through
:mod:`peanchor.core.fileio`.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"


def cpu_model() -> str:
    """``Model name`` from ``lscpu`` (or the platform's processor string)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        out = ""
    for line in out.splitlines():
        if line.lower().startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def machine_info() -> dict[str, Any]:
    """What the numbers were measured on, including the load at the time (other processes share the cores)."""
    import torch

    info: dict[str, Any] = {
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cuda": torch.cuda.is_available(),
    }
    try:
        import timm

        info["timm"] = timm.__version__
    except ImportError:
        info["timm"] = None
    if hasattr(os, "getloadavg"):
        info["loadavg_start"] = [round(v, 2) for v in os.getloadavg()]
    return info


def finish_machine_info(info: dict[str, Any]) -> dict[str, Any]:
    if hasattr(os, "getloadavg"):
        info["loadavg_end"] = [round(v, 2) for v in os.getloadavg()]
    return info


def timed(fn: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds and process CPU seconds (all threads) of one call."""
    cpu0, wall0 = time.process_time(), time.perf_counter()
    fn()
    return time.perf_counter() - wall0, time.process_time() - cpu0


class Timings(dict):
    """``name -> wall seconds per repetition``; ``.cpu`` holds the process CPU seconds alike.

    Wall time is what a user waits for. CPU time is less disturbed by other processes taking the
    cores (but it counts threads spinning while they wait for each other), so both are recorded.
    """

    def __init__(self, names: list[str]) -> None:
        super().__init__({n: [] for n in names})
        self.cpu: dict[str, list[float]] = {n: [] for n in names}


def interleaved(candidates: Mapping[str, Callable[[], Any]], reps: int, warmup: int = 1, log: bool = True) -> Timings:
    """Time every candidate ``reps`` times, interleaved (rotating order), after ``warmup`` untimed calls each."""
    names = list(candidates)
    for _ in range(warmup):
        for name in names:
            candidates[name]()
    times = Timings(names)
    for r in range(reps):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            wall, cpu = timed(candidates[name])
            times[name].append(wall)
            times.cpu[name].append(cpu)
        if log:
            shown = ", ".join(f"{n} {times[n][-1] * 1e3:.1f} ms" for n in names)
            print(f"  rep {r + 1}/{reps}: {shown}", flush=True)
    return times


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def stats(values: list[float], cpu: list[float] | None = None) -> dict[str, Any]:
    """Median, min, max and all samples (seconds); the CPU-time median too when given."""
    out: dict[str, Any] = {
        "median_s": median(values),
        "min_s": float(min(values)),
        "max_s": float(max(values)),
        "samples_s": [float(v) for v in values],
    }
    if cpu is not None:
        out["cpu_median_s"] = median(cpu)
        out["cpu_samples_s"] = [float(v) for v in cpu]
    return out


def all_stats(times: Timings) -> dict[str, Any]:
    return {name: stats(times[name], times.cpu[name]) for name in times}


def ratio(numerator: list[float] | float, denominator: list[float] | float) -> float:
    """Ratio of medians (or of plain numbers)."""
    a = median(numerator) if isinstance(numerator, list) else float(numerator)
    b = median(denominator) if isinstance(denominator, list) else float(denominator)
    return a / b if b > 0 else float("inf")


def paired_ratio(numerator: list[float], denominator: list[float]) -> float:
    """Median over repetitions of the per-repetition ratio.

    Within a repetition the candidates run back to back, so they share the machine's state; this
    statistic survives the load changing between repetitions (on 2 cores one other busy process
    makes a 2-thread torch step several times slower).
    """
    return median([a / b for a, b in zip(numerator, denominator)])


def ratio_of_min(numerator: list[float], denominator: list[float]) -> float:
    """Ratio of the fastest repetitions: a check on the medians when other processes load the machine."""
    return min(numerator) / min(denominator)


def verdict(value: float, goal: float, higher_is_better: bool) -> str:
    ok = value >= goal if higher_is_better else value <= goal
    return "pass" if ok else "miss"


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--quick", action="store_true", help="a fast sanity run with small sizes")
    p.add_argument("--out", type=Path, default=None, help="JSON result path (default: benchmarks/results/<name>.json)")
    p.add_argument("--no-write", action="store_true", help="print only, write no JSON record")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's choice)")
    return p


def apply_threads(threads: int | None) -> None:
    import torch

    if threads:
        torch.set_num_threads(threads)


def write_record(name: str, record: dict[str, Any], out: Path | None = None) -> Path:
    """Write ``record`` atomically to ``out`` or ``benchmarks/results/<name>.json``."""
    from peanchor.core import fileio

    path = out if out is not None else RESULTS_DIR / f"{name}.json"
    record = {"benchmark": name, "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]), **record}
    fileio.write_json(path, record)
    print(f"wrote {path}")
    return path


def model_size_main(
    name: str,
    doc: str,
    run: Callable[[str, int, int, int], dict[str, Any]],
    *,
    model: str,
    img_size: int,
    batch: tuple[int, int],
    reps: tuple[int, int],
    goal: str,
    argv: list[str] | None = None,
) -> dict[str, Any]:
    """The command line of a benchmark of one model size: ``--model``, ``--img-size``, ``--batch`` and ``--reps``
    (defaults: ``batch`` and ``reps`` as ``(quick, full)``) besides the common flags; ``run(model, img_size, batch,
    reps)`` makes the record, written as ``name`` (``name_quick`` with ``--quick``)."""
    p = parser(doc.splitlines()[0])
    p.add_argument("--model", default=model)
    p.add_argument("--img-size", type=int, default=img_size)
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--reps", type=int, default=None)
    args = p.parse_args(argv)
    apply_threads(args.threads)
    machine = machine_info()
    record = run(args.model, args.img_size, args.batch or batch[not args.quick], args.reps or reps[not args.quick])
    record.update(goal=goal, quick=args.quick, machine=finish_machine_info(machine))
    if not args.no_write:
        write_record(name + ("_quick" if args.quick else ""), record, args.out)
    return record
