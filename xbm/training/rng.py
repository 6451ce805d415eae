"""Seeding and capturing every random stream a run draws from, so that a resumed run repeats exactly.

Streams: Python's ``random`` (timm's RandAugment), NumPy's global RNG (PML's ``MPerClassSampler`` draws from
``np.random`` directly, through ``pytorch_metric_learning.utils.common_functions.NUMPY_RANDOM``), torch's CPU
generator (weights init, DataLoader base seeds, random erasing) and, when present, the CUDA generators.
"""
from __future__ import annotations

import contextlib
import random
from typing import Any, Iterator

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too


def rng_state() -> dict[str, Any]:
    """Plain tensors, ints and tuples only, so checkpoints load with ``torch.load(weights_only=True)``."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    numpy_state = {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                   "has_gauss": int(has_gauss), "gauss": float(gauss)}
    state = {"python": random.getstate(), "numpy": numpy_state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["gauss"]))
    torch.set_rng_state(state["torch"].cpu())
    if "cuda" in state and torch.cuda.is_available():
        # one state per GPU visible when saved; a run resumed where fewer are visible (another node, a
        # trial given one GPU of a run that saw four) restores those it has: the run uses the first
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"][:torch.cuda.device_count()]])


@contextlib.contextmanager
def rng_isolated() -> Iterator[None]:
    """A block that leaves every stream as it found it (evaluation): what it draws cannot change the batches,
    augmentations or initialisations that follow, so evaluating more or less often trains the same model, and
    a pass drawn before the block (``prefetch_next_epoch``) meets the same streams as one drawn after it."""
    state = rng_state()
    try:
        yield
    finally:
        set_rng_state(state)


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: torch seeds each worker (base seed + id) and Python's ``random``;
    NumPy is seeded here from the same value so augmentations in workers are reproducible too."""
    np.random.seed(torch.initial_seed() % 2**32)
