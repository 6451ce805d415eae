"""Where a process stands in a data-parallel run, and the few collectives the run needs (no Ray here).

    ranks = Ranks.from_process_group()   # Ranks(rank, world_size) of an initialised torch.distributed group
    rows = ranks.gather(z)               # [world_size * n, d]: every rank's [n, d], in rank order
    value = ranks.broadcast_object(x)    # rank 0's x on every rank

A ``Ranks(0, 1)`` (the default) is a single process: every method is then the identity and no
``torch.distributed`` call is made, so the one-worker path stays exactly what it was. Whoever starts the
workers (Ray Train in ``tune``, ``torch.multiprocessing`` in the tests) initialises the process group first;
:class:`xbm.trainer.Trainer` only joins it.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable

import torch
import torch.distributed as dist
from torch import Tensor, nn


@dataclass(frozen=True)
class Ranks:
    """``rank`` of this process among ``world_size`` data-parallel workers (rank 0 reports and saves)."""

    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if isinstance(self.world_size, bool) or not isinstance(self.world_size, int) or self.world_size < 1:
            raise ValueError(f"world_size must be an integer >= 1, but got {self.world_size!r}")
        if isinstance(self.rank, bool) or not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank must be an integer in [0, world_size={self.world_size}), but got {self.rank!r}")

    @classmethod
    def from_process_group(cls) -> "Ranks":
        """This process's place in the initialised default process group; a single process without one."""
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        return cls()

    @property
    def on_this_node(self) -> int:
        """The ranks on this process's node (``LOCAL_WORLD_SIZE``, set by torchrun and Ray Train; 1 without a
        process group or the variable): they share the node's ``/dev/shm``."""
        return int(os.environ.get("LOCAL_WORLD_SIZE", "1")) if self.distributed else 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def check_process_group(self) -> None:
        """Raise unless a process group with this world size and this rank is initialised (world_size > 1)."""
        if not self.distributed:
            return
        if not (dist.is_available() and dist.is_initialized()):
            raise RuntimeError(f"a run with world_size={self.world_size} needs an initialised torch.distributed "
                               "process group (torch.distributed.init_process_group, or Ray Train's TorchTrainer), "
                               "but none is; initialise it before building the Trainer")
        group = (dist.get_rank(), dist.get_world_size())
        if group != (self.rank, self.world_size):
            raise RuntimeError(f"Ranks(rank={self.rank}, world_size={self.world_size}) must match the process group, "
                               f"but the group has rank={group[0]}, world_size={group[1]}")

    def gather(self, t: Tensor) -> Tensor:
        """Every rank's ``t`` (equal shapes on all ranks) concatenated along dim 0 in rank order; ``t`` itself
        for one process. No gradient flows through the gathered copies."""
        if not self.distributed:
            return t
        t = t.detach().contiguous()
        parts = [torch.empty_like(t) for _ in range(self.world_size)]
        dist.all_gather(parts, t)
        return torch.cat(parts)

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's ``obj`` (any picklable value; what other ranks pass is ignored) on every rank."""
        if not self.distributed:
            return obj
        box = [obj if self.is_main else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    def all_reduce_sum(self, t: Tensor) -> Tensor:
        """The sum of ``t`` over the ranks, in place (``t`` returned); ``t`` for one process."""
        if self.distributed:
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return t

    def broadcast_tensors(self, tensors: Iterable[Tensor]) -> None:
        """Overwrite each tensor in place with rank 0's (same shapes on every rank)."""
        if not self.distributed:
            return
        with torch.no_grad():
            for t in tensors:
                dist.broadcast(t, src=0)

    def average_gradients(self, params: Iterable[nn.Parameter]) -> None:
        """Each parameter's gradient becomes the mean over the ranks (what DDP does), in one collective."""
        grads = [p.grad for p in params if p.grad is not None]
        if not self.distributed or not grads:
            return
        flat = torch.cat([g.reshape(-1) for g in grads])
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        flat.div_(self.world_size)
        offset = 0
        for g in grads:
            g.copy_(flat[offset:offset + g.numel()].view_as(g))
            offset += g.numel()


def unwrap(model: nn.Module) -> nn.Module:
    """The plain model inside a ``DistributedDataParallel`` wrapper (the model itself otherwise)."""
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model
