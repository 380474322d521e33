"""What this job may use: its CPUs (the affinity mask Slurm, taskset or a container gave it, not the node's core
count) and its GPUs (``CUDA_VISIBLE_DEVICES``), and which GPU each of ``reproduce``'s worker processes takes.

Imports: nothing from peanchor (torch lazily, to count GPUs when ``CUDA_VISIBLE_DEVICES`` is unset).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = ["gpu_for_worker", "usable_cpus", "visible_gpus"]


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one, else the machine's count.

    >>> usable_cpus() >= 1
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def visible_gpus(environ: Mapping[str, str] | None = None) -> list[str]:
    """The CUDA devices this job may use, as ``CUDA_VISIBLE_DEVICES`` entries (indices, UUIDs or MIG ids).

    ``CUDA_VISIBLE_DEVICES`` set (Slurm's ``--gres``, a container): its entries, in order; set but empty: none.
    Unset: every device torch sees (``"0"``, ``"1"``, ...).

    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "2,5"}), visible_gpus({"CUDA_VISIBLE_DEVICES": ""})
    (['2', '5'], [])
    """
    env = os.environ if environ is None else environ
    text = env.get("CUDA_VISIBLE_DEVICES")
    if text is not None:
        entries = [e.strip() for e in text.split(",") if e.strip()]
        # CUDA stops at the first invalid entry; "-1" and "none" hide every device.
        return [] if entries and entries[0] in ("-1", "none", "None", "NoDevFiles") else entries
    import torch

    return [str(i) for i in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def gpu_for_worker(slot: int, gpus: list[str]) -> str:
    """Round-robin: worker ``slot`` (0-based) gets ``gpus[slot % len(gpus)]``.

    >>> [gpu_for_worker(s, ["2", "5"]) for s in range(4)]
    ['2', '5', '2', '5']
    """
    if not gpus:
        raise ValueError("no GPUs to place workers on")
    return gpus[slot % len(gpus)]
