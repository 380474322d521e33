"""How many cells fit in memory at once: a cell's estimated peak host memory, what the host has available, and
the number of cells ``reproduce`` runs at once (``--jobs``) with the line that says why.

A cell's peak resident memory (its process and its DataLoader workers), in bytes::

    base                           1 GB: Python, torch and peanchor imported, the model built (measured: 0.75 GiB)
  + 16 × parameters                weights, gradients and AdamW's two moments, fp32
  + activations (CPU runs only)    batch × depth × (ACT_TOKENS·N·D + ACT_ATTENTION·H·N²) × 4 B
                                   (N tokens, width D, H heads; on a GPU they are the device's)
  + evaluation images              images × 3·S² B × (1 + shifts, + 5 per kind with severities): uint8, kept
  + loader workers                 each 750 MB (measured: 827 MiB, torch's pages included) + prefetch 4 × batch × 3·S²
                                   × (4 B per pixel for image files, which decode to float32 in the workers; 1 B for
                                   array datasets)

ACT_TOKENS and ACT_ATTENTION were fitted to the measured peak of one ``paper`` cell trained on CPU (``vit_paper``:
224 px, batch 128, fp32; its ``ru_maxrss`` 16,418 MiB, its largest DataLoader worker 827 MiB): 124 MB per image,
i.e. ACT_TOKENS·N·D + ACT_ATTENTION·H·N² = 2.6 M floats per image and block (dropout masks and the attention
probabilities are saved for backward). A ``cpu`` cell's measured peak (1.23 GB) and a ``smoke`` cell's (0.84 GB) sit
under their estimates (1.33 and 1.01 GB).

Imports: :mod:`peanchor.study.options`, :mod:`peanchor.study.resources`, :mod:`peanchor.training` (the model, built
to count its parameters).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "ACT_ATTENTION", "ACT_TOKENS", "ARRAY_DATASETS", "JobPlan", "cell_peak_bytes", "memory_available", "plan_jobs",
]  # fmt: skip

GB = 1e9
ARRAY_DATASETS = frozenset({"scenes", "cifar10", "cifar100", "prepared"})  # loader workers read uint8 batches
BASE_BYTES = 1e9
WORKER_BYTES = 750e6
PREFETCH = 4  # batches per loader worker (peanchor.training.loaders)
ACT_TOKENS = 22.0  # floats saved per token and channel per block in training
ACT_ATTENTION = 3.0  # floats saved per attention weight per block in training (scores, probabilities, dropout)


def memory_available(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> float | None:
    """Bytes this job may still use: ``MemAvailable`` of ``/proc/meminfo``, or less where a cgroup (Slurm, a
    container) limits the job (``memory.max`` minus ``memory.current``); None where neither can be read."""
    found: list[float] = []
    try:
        for line in Path(meminfo).read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(float(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        limit = Path(cgroup, "memory.max").read_text().strip()
        if limit != "max":
            found.append(float(limit) - float(Path(cgroup, "memory.current").read_text().strip()))
    except (OSError, ValueError):
        pass
    return min(found) if found else None


def cell_peak_bytes(config: Any, *, eval_images: int, shifts: int, severities: bool, on_gpu: bool, cpus: int,
                    num_classes: int, image_files: bool) -> float:  # fmt: skip
    """The estimated peak resident host memory of one cell of ``config`` (a TrainConfig), per the formula above."""
    from peanchor.training.loop import build_model

    model = build_model(config, num_classes, config.data.img_size)  # a second at most, for the paper's ViT
    params = sum(p.numel() for p in model.parameters())
    t, size = config.train, config.data.img_size
    args = model.model_args
    tokens = math.prod(model.grid) + 1  # patches and CLS (registers, if any, are few)
    width, depth, heads = args["embed_dim"], args["depth"], args["num_heads"]
    peak = BASE_BYTES + 16.0 * params
    if not on_gpu:
        per_image = depth * (ACT_TOKENS * tokens * width + ACT_ATTENTION * heads * tokens**2) * 4
        peak += t.batch_size * per_image
    copies = 1 + shifts + (5 * shifts if severities else 0)
    peak += eval_images * 3 * size * size * copies
    loader_workers = min(t.num_workers, cpus)
    peak += loader_workers * (WORKER_BYTES + PREFETCH * t.batch_size * 3 * size * size * (4 if image_files else 1))
    return peak


@dataclass(frozen=True)
class JobPlan:
    jobs: int  # cells run at once
    line: str  # the run's first line: how many, and why
    warning: str | None = None  # an explicit --jobs (or a single cell) that may not fit


def plan_jobs(cells: int, jobs: int, auto: bool, bound: str, per_cell: float | None,
              available: float | None) -> JobPlan:  # fmt: skip
    """``--jobs``: with ``auto``, the smaller of ``jobs`` (the CPUs or GPUs, named by ``bound``) and the cells that
    fit in the memory available; an explicit number as given, with a warning when it does not fit.

    >>> plan_jobs(5, 2, True, "2 CPUs", 9e9, 21e9).line
    'running 5 cells, 2 at a time (2 CPUs; memory: ~9 GB per cell, 21 GB available)'
    >>> plan_jobs(5, 2, True, "2 CPUs", 12e9, 21e9).line
    'running 5 cells, 1 at a time (memory: ~12 GB per cell, 21 GB available; 2 CPUs)'
    """
    if per_cell is None or available is None:
        memory, fit = "memory: not estimated", jobs
    else:
        memory = f"memory: ~{per_cell / GB:.0f} GB per cell, {available / GB:.0f} GB available"
        fit = max(1, int(available // per_cell))
    n = max(1, min(jobs, fit, cells)) if auto else max(1, min(jobs, cells))
    reason = f"{memory}; {bound}" if auto and fit < jobs and fit < cells else f"{bound}; {memory}"
    warning = None
    if per_cell is not None and available is not None and n * per_cell > available:
        what = f"--jobs {jobs} runs {n} cells at once at ~{per_cell / GB:.0f} GB each" if n > 1 else (
            f"a cell needs ~{per_cell / GB:.0f} GB")  # fmt: skip
        warning = (f"{what}, but {available / GB:.0f} GB is available: a cell may be killed for memory (lower "
                   "train.batch_size or train.num_workers" + (", or --jobs)" if n > 1 else ")"))  # fmt: skip
    return JobPlan(n, f"running {cells} cell{'s' if cells != 1 else ''}, {n} at a time ({reason})", warning)
