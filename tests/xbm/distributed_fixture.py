"""Data-parallel runs for tests/xbm/training/test_distributed.py: ``spawn(job, world_size, ...)`` starts the ranks
(``torch.multiprocessing``, gloo on the CPU, a file:// rendezvous), each runs ``job(rank, ...)`` inside the
process group and saves what it returns; the caller gets every rank's value. ``record(trainer, epochs)``
trains and keeps what the tests compare: per epoch the metrics and the memory, per step the memory."""
from __future__ import annotations

import gc
import io
import itertools
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from xbm.config import TrainConfig
from xbm.data.splits import assemble
from xbm.data.toy import make_toy
from xbm.training.distributed import Ranks
from xbm.trainer import Trainer

from tests.xbm.conftest import TINY

# The toy set of tests/xbm/conftest.py's tiny_trainer (192 training rows, batches of 32: 6 steps per epoch).
BASE = {**TINY, "epochs": 3, "warmup_epochs": 1, "eval_every": 3, "num_workers": "0"}
# The cases of tests/xbm/training/test_distributed.py: every normaliser kind, MoCo (its queue adapted by AXBN), the
# pair-margin miner, a PML loss on index pairs and the other label-free objectives. SupCon over every pair
# (miner.kind none) in the 3-epoch cases: a margin is a discontinuity, and a pair whose distance lies within
# rounding (1e-7) of it is mined by one run and not by the other (seen: step 12 of 18, after which the
# memories differ by 1e-4); the miner's case stops after one epoch.
ALL_PAIRS = {"miner.kind": "none"}
CASES = {
    "none": {"normaliser.kind": "none", **ALL_PAIRS},
    "xbn": {"normaliser.kind": "xbn", **ALL_PAIRS},
    "axbn": {"normaliser.kind": "axbn", "normaliser.kalman_interval": 2, **ALL_PAIRS},
    "ema": {"normaliser.kind": "ema", **ALL_PAIRS},
    "pcxbn": {"normaliser.kind": "pcxbn", **ALL_PAIRS},
    "scxbn": {"normaliser.kind": "scxbn", **ALL_PAIRS},
    "moco": {"objective": "moco", "normaliser.kind": "axbn"},
    "miner": {"normaliser.kind": "xbn", "epochs": 1},
    # PML's index-pair path (not SupCon's masks): a triplet loss, and the label-free objectives
    "triplet": {"loss.kind": "triplet", "normaliser.kind": "xbn", **ALL_PAIRS},
    # SGD: the toy's two views of an image are equal vectors, many gradient components cancel to rounding noise,
    # and Adam's first steps scale noise to +-lr (seen: 1e-7 -> 1.6e-5 in the memory in one step; SGD: 6e-7)
    "instance": {"objective": "instance", "normaliser.kind": "ema", "optimizer": "sgd", "lr": 0.05},
    "neighbours": {"objective": "neighbours", "normaliser.kind": "xbn", "neighbours.threshold": 0.5},
}
# test_resnet on digits: BatchNorm in every block; batches of 16 (4 classes x 4), 8 rows per worker.
RESNET = {"dataset": "digits", "model": "test_resnet", "image_size": 32, "batch_size": 16, "embedding_size": 16,
          "epochs": 1, "warmup_epochs": 0, **ALL_PAIRS}
RESNET_CASES = {"synced": {"sync_bn": "auto"}, "per_rank": {"sync_bn": "off"},
                "moco": {"objective": "moco", "miner.kind": "pair_margin", "moco.bn_splits": 4}}


def build(values: dict, ranks: Ranks = Ranks(), **kwargs) -> Trainer:
    """A Trainer on the tiny toy set (``image`` data sets: their own ``build_dataset``)."""
    cfg = TrainConfig.from_dict({**BASE, **values})
    splits = assemble(make_toy(num_classes=48, samples_per_class=8), cfg.val_fraction, cfg.image_size) \
        if cfg.dataset == "toy" else None
    return Trainer(cfg, splits=splits, ranks=ranks, **kwargs)


def record(trainer: Trainer, epochs: int | None = None) -> dict[str, Any]:
    """Train (``epochs`` of ``fit()``; all by default) and return ``metrics`` (per epoch), ``memory`` (per
    epoch: valid rows, labels, indices), ``steps`` (per step: the whole memory buffer), ``weights``."""
    steps: list[torch.Tensor] = []
    if trainer.xbm is not None:
        trainer.xbm.register_forward_hook(lambda m, args, out: steps.append(m.memory.embeddings.detach().clone()))
    metrics, memory = [], []
    fit = trainer.fit()
    for _ in range(epochs if epochs is not None else trainer.cfg.epochs):
        metrics.append(next(fit))
        if trainer.xbm is not None:
            rows = trainer.xbm.memory.valid()
            memory.append((rows.embeddings.clone(), rows.labels.clone(), rows.indices.clone()))
    return {"metrics": metrics, "memory": memory, "steps": steps,
            "weights": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}}


def _rank_main(rank: int, world_size: int, init: str, out: str, job: Callable, args: tuple, backend: str) -> None:
    torch.set_num_threads(1)
    if backend == "nccl":
        torch.cuda.set_device(rank)   # what a launcher does: each rank on its own GPU
    dist.init_process_group(backend, init_method=init, rank=rank, world_size=world_size)
    try:
        torch.save(job(Ranks.from_process_group(), *args), os.path.join(out, f"rank{rank}.pt"))
    finally:
        # The job's trainers sit in reference cycles, and their DDP holds the process group: without a
        # collection it outlives destroy_process_group (seen: 1 DDP alive after it on each rank) and gloo's
        # threads are torn down with the interpreter, which can abort the rank ("terminate called without an
        # active exception", SIGABRT: one CI run; pytorch#65513 is the same pattern).
        gc.collect()
        dist.destroy_process_group()


# The ranks fork from a server that imported torch, the trainer and these jobs once: a spawned rank imports them
# again (5-10 s of CPU each on a 2-core machine, a dozen ranks in test_distributed). The server is a fresh
# interpreter, so a rank does not inherit the test process's threads (Ray's gRPC, an earlier test's loaders).
# The preload takes effect where this process starts its forkserver; started earlier, it is reused as it is.
FORKSERVER_PRELOAD = ["torch", "xbm.trainer", __name__]


def spawn(job: Callable, world_size: int, *args, backend: str = "gloo") -> list[Any]:
    """``job(ranks, *args)`` on ``world_size`` ranks of a fresh process group; each rank's value."""
    mp.set_forkserver_preload(FORKSERVER_PRELOAD)
    with tempfile.TemporaryDirectory() as out:
        init = "file://" + str(Path(out) / "rendezvous")
        mp.start_processes(_rank_main, args=(world_size, init, out, job, args, backend), nprocs=world_size,
                           join=True, start_method="forkserver")
        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


# ---- jobs (module level: spawned processes import them) ------------------------------------------
def run_all(ranks: Ranks, configs: list[dict]) -> list[dict]:
    """``record`` of a 2-worker run of each config, one after the other in the same process group."""
    return [record(build({**values, "workers": ranks.world_size}, ranks)) for values in configs]


def run_part(ranks: Ranks, values: dict, epochs: int, state: bytes | None) -> dict:
    """``epochs`` epochs of a run (continuing the ``torch.save``d ``state`` when given), its record and its
    state_dict. The state travels as bytes, as from a checkpoint file: tensors handed to ``mp.spawn`` are
    moved to shared memory, and the ranks' optimisers would then update one shared copy of their moments."""
    trainer = build({**values, "workers": ranks.world_size}, ranks)
    if state is not None:
        trainer.load_state_dict(torch.load(io.BytesIO(state), weights_only=True))
    return {"record": record(trainer, epochs), "state": trainer.state_dict()}


def ddp_after_close(ranks: Ranks) -> int:
    """The DDP objects left (none collected) after one epoch and ``close()``, the trainer still referenced."""
    trainer = build({**CASES["xbn"], "epochs": 1, "workers": ranks.world_size}, ranks)
    next(trainer.fit())
    trainer.close()
    return sum(isinstance(o, torch.nn.parallel.DistributedDataParallel) for o in gc.get_objects())


def first_steps(batches, description: str, steps: int = 4):
    """A Trainer ``progress`` that ends each epoch after ``steps`` batches."""
    return itertools.islice(batches, steps)


def resnet_job(ranks: Ranks) -> dict[str, float]:
    """The loss of RESNET's first 4 steps on the ranks: supervised with sync_bn auto (on) and off, and MoCo
    (per-rank BatchNorm, its shuffling BN, 2 of bn_splits=4 sub-batches per rank). Four steps, not an epoch:
    this run is chaotic (a 1e-7 relative change of the initial weights of one worker's run moves its loss by
    2e-4 at step 4 and by 1e-2 at step 8), so later steps compare rounding, not BatchNorm."""
    losses = {}
    for name, values in RESNET_CASES.items():
        trainer = build({**RESNET, **values, "workers": ranks.world_size}, ranks, progress=first_steps)
        losses[name] = next(trainer.fit())["loss"]
    return losses


def cuda_job(ranks: Ranks, values: dict) -> dict:
    """``record`` of a CUDA run (fp32) of ``values`` on the ranks."""
    return record(build({**values, "workers": ranks.world_size, "device": "cuda", "amp": "off"}, ranks))


def saved(state: dict) -> bytes:
    """``state`` as a checkpoint file's bytes."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def batchnorm_job(ranks: Ranks, x: torch.Tensor, weights: torch.Tensor) -> dict:
    """A conv + BatchNorm (synchronised) net on this rank's contiguous share of ``x``: its outputs, and the
    gradients of ``sum(weights * out)`` over the whole batch (each rank's part, summed over the ranks)."""
    from xbm.training.sync_bn import convert_sync_batchnorm
    torch.manual_seed(0)
    net = convert_sync_batchnorm(torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                                                     torch.nn.ReLU()), torch.device("cpu"))
    share = len(x) // ranks.world_size
    rows = slice(ranks.rank * share, (ranks.rank + 1) * share)
    x = x[rows].clone().requires_grad_()
    out = net(x)
    (weights[rows] * out).sum().backward()
    grads = [ranks.all_reduce_sum(p.grad.clone()) for p in net.parameters()]
    return {"out": out.detach(), "x_grad": x.grad, "grads": grads,
            "buffers": {k: v.clone() for k, v in net.state_dict().items()}}
