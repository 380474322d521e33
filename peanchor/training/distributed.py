"""The little peanchor needs from ``torch.distributed``: set-up under ``torchrun``, reductions, and
rank-0-only sections that stop every rank cleanly when rank 0 fails.

Single-process runs use the same interface with ``world_size == 1``; every call is then a no-op.

Imports: torch; :mod:`peanchor.core.devices`, :mod:`peanchor.core.errors`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import torch
import torch.distributed as dist

from peanchor.core import devices
from peanchor.core.errors import ConfigError, PeanchorError

T = TypeVar("T")


class PeerFailed(PeanchorError):
    """Another rank stopped the run; its own message says why."""


@dataclass
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False  # we initialised the process group, so we tear it down

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    def all_reduce_sum(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over ranks in place (on the training device) and return it."""
        if self.enabled:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def all_agree(self, ok: bool) -> bool:
        """True when ``ok`` holds on every rank."""
        if not self.enabled:
            return ok
        flag = torch.tensor([0 if ok else 1], dtype=torch.int64, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.SUM)
        return int(flag.item()) == 0

    def broadcast_ints(self, values: list[int]) -> list[int]:
        """Rank 0's ``values`` on every rank."""
        if not self.enabled:
            return values
        t = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.broadcast(t, src=0)
        return [int(v) for v in t.tolist()]

    def barrier(self) -> None:
        if self.enabled:
            dist.barrier()

    def close(self) -> None:
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def resolve_device(preference: str, local_rank: int = 0) -> torch.device:
    """``auto`` → the local CUDA device if there is one, else CPU; a device not here is one line
    (:func:`peanchor.core.devices.resolve_device`, which ``analyze`` shares)."""
    return devices.resolve_device(preference, setting="train.device", local_rank=local_rank)


def setup_distributed(device_preference: str) -> DistContext:
    """Read ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (set by ``torchrun``) and join the process group.

    NCCL on CUDA, gloo on CPU. Under torchrun each rank uses the GPU of its ``LOCAL_RANK`` (``auto`` or
    ``cuda``); an explicit ``cuda:N`` would put every rank on one GPU and is refused. Without those variables
    (or with ``WORLD_SIZE=1``) this is a plain single-process context.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if world > 1 and device_preference.startswith("cuda:"):
        raise ConfigError(
            f"train.device={device_preference!r} under torchrun would put all {world} processes on one GPU: use "
            "--device cuda (or auto), and each process takes the GPU of its LOCAL_RANK; choose the GPUs with "
            "CUDA_VISIBLE_DEVICES"
        )
    device = resolve_device(device_preference, local_rank)
    if world <= 1:
        return DistContext(device=device)
    if device.type == "cuda":
        if local_rank >= torch.cuda.device_count():
            raise ConfigError(
                f"LOCAL_RANK={local_rank} but only {torch.cuda.device_count()} GPU(s) are visible: start at most "
                "that many processes per node (torchrun --nproc_per_node)"
            )
        torch.cuda.set_device(device)
    owns = False
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, rank=rank, world_size=world, **kwargs)
        owns = True
    return DistContext(rank=rank, world_size=world, local_rank=local_rank, device=device, owns_group=owns)


def main_first(ctx: DistContext, fn: Callable[[], T], *, others: bool = True) -> T | None:
    """Run ``fn`` on rank 0, then (if ``others``) on the other ranks; a failure on rank 0 stops all.

    Use it for anything that writes shared state (dataset caches, run files): rank 0 does it once,
    the others then find it done. Ranks other than 0 raise :class:`PeerFailed` if rank 0 failed.
    """
    result: T | None = None
    error: BaseException | None = None
    if ctx.is_main:
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001 (every rank must learn about it, or the others hang)
            error = e
    ok = ctx.all_agree(error is None) if ctx.enabled else error is None
    if error is not None:
        raise error
    if not ok:
        raise PeerFailed("rank 0 stopped the run (see its error message)")
    if not others:
        return result
    error = None
    if not ctx.is_main:
        try:
            result = fn()
        except BaseException as e:  # noqa: BLE001
            error = e
    ok = ctx.all_agree(error is None)
    if error is not None:
        raise error
    if not ok:
        raise PeerFailed("another rank stopped the run (see its error message)")
    return result
