"""What the trainer does differently on a data-parallel rank (:class:`xbm.training.distributed.Ranks`, world_size > 1):
the rank's device, the DDP wrapper, and keeping every rank's run state equal (RNG streams, module buffers,
rank 0's evaluation row). With one worker each of these is the identity, and the one-worker path is unchanged.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Callable, Iterable

import torch
from torch import nn

from xbm.runtime.device import Runtime
from xbm.training.distributed import Ranks
from xbm.training.rng import rng_state, set_rng_state
from xbm.training.sharding import GatheredCriterion, ShardedSampler

# The host RNG streams every rank draws its batches from (the CUDA generators are per device: left alone).
SHARED_STREAMS = ("python", "numpy", "torch")


def check_workers(workers: int, ranks: Ranks) -> None:
    """``workers`` (the config) must be the process group's size, in an initialised group when > 1."""
    if workers != ranks.world_size:
        raise ValueError(f"workers={workers} must equal the data-parallel world size, but the Trainer got "
                         f"Ranks(rank={ranks.rank}, world_size={ranks.world_size}): start {workers} processes in "
                         "one torch.distributed process group and pass Ranks.from_process_group() (xbm-tune train "
                         "--workers does both), or set workers=1")
    ranks.check_process_group()


def rank_runtime(runtime: Runtime, ranks: Ranks) -> Runtime:
    """On CUDA with several ranks, the index-less "cuda" device becomes this process's current device (the
    launcher calls ``torch.cuda.set_device`` per rank), which DDP and NCCL need spelled out."""
    if ranks.distributed and runtime.device.type == "cuda" and runtime.device.index is None:
        return dataclasses.replace(runtime, device=torch.device("cuda", torch.cuda.current_device()))
    return runtime


def wrap_ddp(model: nn.Module, device: torch.device) -> nn.Module:
    """``DistributedDataParallel`` over ``model`` (it averages the gradients). Buffers are not broadcast at
    each forward: SyncBatchNorm keeps them equal, and :func:`share_buffers` makes them equal after each epoch
    (MoCo's per-rank BatchNorm may call the model more than once per step)."""
    with warnings.catch_warnings():   # torch 2.14 renames it; the new name's False still syncs at init
        warnings.simplefilter("ignore", FutureWarning)
        return nn.parallel.DistributedDataParallel(model, device_ids=[device] if device.type == "cuda" else None,
                                                   broadcast_buffers=False)


def share_rng(ranks: Ranks) -> None:
    """Every rank continues from rank 0's host RNG streams (the samplers' draws, MoCo's key permutation)."""
    if ranks.distributed:
        state = rng_state()
        set_rng_state(ranks.broadcast_object({k: state[k] for k in SHARED_STREAMS}))


def share_buffers(ranks: Ranks, modules: Iterable[nn.Module]) -> None:
    """Rank 0's buffers (BatchNorm running statistics, ...) on every rank: equal checkpoints and evaluation."""
    ranks.broadcast_tensors([b for m in modules for b in m.buffers()])


def on_main(ranks: Ranks, compute: Callable[[], Any]) -> Any:
    """``compute()`` on rank 0 only (no collective inside it), its value on every rank."""
    return ranks.broadcast_object(compute() if ranks.is_main else None)


class DataParallel:
    """The trainer's parts that change on a rank of several: the step's model (DDP, built at the first main
    epoch: the warm-up trains the head alone, its gradients averaged by :meth:`grad_sync`), the step's
    criterion (:class:`xbm.training.sharding.GatheredCriterion`) and the loader's sampler (this rank's
    share). With one rank each is what the one-worker run uses."""

    def __init__(self, ranks: Ranks, device: torch.device) -> None:
        self.ranks, self.device = ranks, device
        self._ddp: nn.Module | None = None

    def model(self, model: nn.Module) -> nn.Module:
        if not self.ranks.distributed:
            return model
        if self._ddp is None:
            self._ddp = wrap_ddp(model, self.device)
        return self._ddp

    def close(self) -> None:
        """Drop the DDP wrapper. It holds the process group: kept (the trainer sits in reference cycles), the group
        outlives ``destroy_process_group`` and its gloo threads are torn down with the interpreter, which can
        abort the process ("terminate called without an active exception"; pytorch#65513)."""
        self._ddp = None

    def criterion(self, criterion: nn.Module, blocks: int) -> nn.Module:
        return GatheredCriterion(criterion, self.ranks, blocks) if self.ranks.distributed else criterion

    def grad_sync(self, params: list[nn.Parameter]) -> Callable[[], None] | None:
        return (lambda: self.ranks.average_gradients(params)) if self.ranks.distributed else None

    def sampler(self, sampler, seed: int, batch_size: int) -> ShardedSampler | None:
        return ShardedSampler(sampler, seed, batch_size, self.ranks) if self.ranks.distributed else None
