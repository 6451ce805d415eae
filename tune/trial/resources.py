"""What a trial asks Ray for, and what it does with what it gets: CPUs that follow the GPUs
(``--cpus-per-trial auto``), a CUDA allocator capped at the trial's share of a GPU, and an out-of-memory
error that explains itself.

``auto`` resolves once, on the driver, after Ray is connected (``resolve_cpus_per_trial``): 1 CPU per
trial without GPUs; with ``--gpus-per-trial g``, a node's CPUs x g / its GPUs (the CPUs that come with
that share of the node), the smallest over the GPU nodes, at least 1. A GPU trial with 1 CPU gets no
loader worker and decodes its images in the training process, which no GPU can wait for.
"""
from __future__ import annotations

import math
import os
import weakref
from typing import Any, Callable, Iterable, Mapping

AUTO = "auto"
ALLOC_CONF = "PYTORCH_CUDA_ALLOC_CONF"
ALLOC_CONF_ANY_DEVICE = "PYTORCH_ALLOC_CONF"  # torch's newer name; the CUDA one, when set, wins over it
EXPANDABLE = "expandable_segments:True"
# What a CUDA process holds outside its caching allocator (context, cuBLAS/cuDNN handles and workspaces, kernel
# images): about 0.5-1 GiB on current GPUs (estimated, not measured here)
OUTSIDE_ALLOCATOR = 1 << 30


def resolve_cpus_per_trial(requested: float | str, gpus_per_trial: float, nodes: Iterable[Mapping[str, Any]],
                           workers: int = 1, launcher_cpu: float = 0.0) -> float:
    """``requested`` as given, or for ``auto`` the CPUs that come with ``gpus_per_trial`` of a GPU node.

    ``nodes`` are ``ray.nodes()`` entries (``Alive``, ``Resources`` with ``CPU`` / ``GPU``). Whole CPUs, so
    that ``num_workers=auto`` gets whole workers; the smallest over the GPU nodes, so a trial fits on each.
    Trials of ``workers`` > 1 (``gpus_per_trial`` is then one worker's) also hold a launcher of
    ``launcher_cpu`` each: the node's CPUs less its trials' launchers are shared, or the workers of the last
    trial on a node never fit (2 workers of 4 CPUs and a launcher of 0.01 on an 8-CPU node wait forever)."""
    if requested != AUTO:
        return float(requested)
    if gpus_per_trial <= 0:
        return 1.0
    shares = []
    for node in nodes:
        cpus, gpus = node.get("Resources", {}).get("CPU", 0.0), node.get("Resources", {}).get("GPU", 0)
        if node.get("Alive", True) and gpus > 0:
            launchers = max(1, math.floor(gpus / (workers * gpus_per_trial))) if workers > 1 else 0
            shares.append(math.floor((cpus - launchers * launcher_cpu) * gpus_per_trial / gpus))
    return float(max(min(shares), 1)) if shares else 1.0


def allocator_cap(share: float, total: int) -> float:
    """The allocator's fraction of a ``total``-byte GPU for a trial holding ``share`` of it: the share less
    :data:`OUTSIDE_ALLOCATOR`, so that the caps of the trials filling a GPU leave room for their processes'
    own memory (caps summing to the whole device would run out of physical memory below them, an error then
    put down to the batch size); at least half the share."""
    return max(share - OUTSIDE_ALLOCATOR / total, share / 2)


def cap_gpu_memory(fraction: float) -> bool:
    """Cap this process's CUDA allocator at its part (:func:`allocator_cap`) of a ``fraction`` share of its
    device when the trial shares a GPU (``0 < fraction < 1``), and ask for expandable segments (less
    fragmentation, so the cap is reached later) unless the user set ``PYTORCH_CUDA_ALLOC_CONF`` or
    ``PYTORCH_ALLOC_CONF`` themselves. Without the cap, trials sharing a GPU grow until one of them runs out
    of memory. Returns whether a cap was set."""
    import torch

    if not 0 < fraction < 1 or not torch.cuda.is_available():
        return False
    if ALLOC_CONF not in os.environ and ALLOC_CONF_ANY_DEVICE not in os.environ:
        os.environ[ALLOC_CONF] = EXPANDABLE  # read by the allocator when CUDA first allocates
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    torch.cuda.set_per_process_memory_fraction(allocator_cap(fraction, total))
    return True


_previous_trainer: Callable[[], Any] = lambda: None  # a weak reference to this process's last trial's Trainer


def track_trainer(trainer) -> None:
    """Remember (weakly) the trainer of the trial now running, for :func:`free_previous_trial`."""
    global _previous_trainer
    _previous_trainer = weakref.ref(trainer)


def free_previous_trial() -> None:
    """Free what an earlier trial of this process left: with ``reuse_actors`` a trial runs where the last one
    ran, and its Trainer may sit in reference cycles (measured: the first trainer of a process, through frames
    torch keeps from its lazy imports), which only the cyclic collector frees, late (the oldest generation).
    Until then its model, optimiser and memory hold GPU memory under this trial's cap and its loader workers
    stay alive. Collects only when that trainer is still alive: a full collection of a process holding torch
    takes ~0.3 s. Cached CUDA blocks then go back to the device, for the trials sharing it. It is closed first
    (``Trainer.close``: its loader workers, and a rank's process group, which no finaliser lets go of)."""
    trainer = _previous_trainer()
    if trainer is None:
        return
    import gc

    import torch

    trainer.close()
    del trainer
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class RankOutOfMemoryError(RuntimeError):
    """A data-parallel rank ran out of CUDA memory: ``reason`` is :func:`out_of_memory_reason` as that rank
    measured it, the message torch's own. The launcher, which reports the failure, holds no GPU: read there,
    the peak would be its own (0), and its first CUDA call would open a context on a GPU another trial owns."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(reason, message)  # both in args: Ray pickles the error to the launcher
        self.reason = reason

    def __str__(self) -> str:
        return self.args[1]


def out_of_memory_reason(batch_size: int, gpu_fraction: float) -> str:
    """What a CUDA out-of-memory error means for this trial: the batch size, the peak it reached, the cap
    it had, and what to change. Not retried: the same config runs out of memory again."""
    import torch

    if torch.cuda.is_available():
        device = torch.cuda.current_device()
        total = torch.cuda.get_device_properties(device).total_memory
        peak = f"{torch.cuda.max_memory_allocated(device) / 2**30:.2f} GiB"
        part = allocator_cap(gpu_fraction, total) if gpu_fraction < 1 else 1.0
        cap = f"{total * part / 2**30:.2f} GiB (a {gpu_fraction:g} share of the GPU's {total / 2**30:.1f} GiB)"
    else:
        peak, cap = "unknown (no CUDA device)", "none"
    return (f"out of memory at batch_size={batch_size}: peak {peak}, cap {cap}. Lower batch_size (or image_size), "
            f"use amp=bf16, or give each trial a larger share of a GPU (--gpus-per-trial)")
