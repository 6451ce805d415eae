"""Data-parallel runs for tests/xbm/test_distributed.py: ``spawn(job, world_size, ...)`` starts the ranks
(``torch.multiprocessing``, gloo on the CPU, a file:// rendezvous), each runs ``job(rank, ...)`` inside the
process group and saves what it returns; the caller gets every rank's value. ``record(trainer, epochs)``
trains and keeps what the tests compare: per epoch the metrics and the memory, per step the memory."""
from __future__ import annotations

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
from xbm.distributed import Ranks
from xbm.trainer import Trainer

from tests.xbm.conftest import TINY

# The toy set of tests/xbm/conftest.py's tiny_trainer (192 training rows, batches of 32: 6 steps per epoch).
BASE = {**TINY, "epochs": 3, "warmup_epochs": 1, "eval_every": 3, "num_workers": "0"}


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


def _rank_main(rank: int, world_size: int, init: str, out: str, job: Callable, args: tuple) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world_size)
    try:
        torch.save(job(Ranks.from_process_group(), *args), os.path.join(out, f"rank{rank}.pt"))
    finally:
        dist.destroy_process_group()


def spawn(job: Callable, world_size: int, *args) -> list[Any]:
    """``job(ranks, *args)`` on ``world_size`` ranks of a fresh gloo process group; each rank's value."""
    with tempfile.TemporaryDirectory() as out:
        init = "file://" + str(Path(out) / "rendezvous")
        mp.spawn(_rank_main, args=(world_size, init, out, job, args), nprocs=world_size, join=True)
        return [torch.load(Path(out) / f"rank{r}.pt", weights_only=False) for r in range(world_size)]


# ---- jobs (module level: spawned processes import them) ------------------------------------------
def run_all(ranks: Ranks, configs: list[dict]) -> list[dict]:
    """``record`` of a 2-worker run of each config, one after the other in the same process group."""
    return [record(build({**values, "workers": ranks.world_size}, ranks)) for values in configs]


def run_part(ranks: Ranks, values: dict, epochs: int, state: dict | None) -> dict:
    """``epochs`` epochs of a run (continuing ``state`` when given), its record and its state_dict."""
    trainer = build({**values, "workers": ranks.world_size}, ranks)
    if state is not None:
        trainer.load_state_dict(state)
    return {"record": record(trainer, epochs), "state": trainer.state_dict()}
