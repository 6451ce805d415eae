"""What an objective is: how a training batch becomes embeddings and the labels the pair loss sees.

The trainer draws indices with the objective's :meth:`~Objective.sampler`, loads them through its
:meth:`~Objective.dataset` (one view per drawn image, or two), and per step calls the objective on the batch:

    batch = objective(model, x, y, idx, prepare, runtime)  # Batch(embeddings, labels, indices, enqueue_mask)
    loss = criterion(batch.embeddings.float(), batch.labels, epoch=e, indices=batch.indices,
                     enqueue_mask=batch.enqueue_mask)      # BatchLoss or XBMLoss with the objective's pair loss
    ... optimiser step ...
    objective.after_step(model)                            # e.g. MoCo's moving-average key encoder

A label-free objective (``uses_labels = False``) never passes ``y`` on: its labels are instance ids or
pseudo-labels, and its sampler draws images, not classes. Objectives are ``nn.Module``s so that their state
(a key encoder, a candidate pool) goes into the trainer's checkpoint through ``state_dict``.
"""
from __future__ import annotations

from typing import Callable, NamedTuple, Optional

import torch
from torch import Tensor, nn
from torch.utils.data import Dataset, Sampler

from xbm.config import TrainConfig
from xbm.training.distributed import Ranks


class Batch(NamedTuple):
    embeddings: Tensor               # [n, d], possibly fp16/bf16 under autocast
    labels: Tensor                   # [n] what the pair loss calls a class
    indices: Tensor                  # [n] training-set index of each row (the memory keeps it)
    # [n] bool on the CPU: rows that go into the memory (MoCo's keys); None: all. The objective's layout, known
    # before the step and the same on every rank: on the host, splitting the batch reads no device buffer.
    enqueue_mask: Optional[Tensor]


class Objective(nn.Module):
    """Base: the supervised defaults; subclasses override what differs."""

    name = ""
    uses_labels = False
    # A batch's rows are ``blocks`` consecutive blocks (two-view objectives: first views, then second views):
    # data-parallel ranks gather them block by block into the one-worker order (xbm.training.sharding).
    blocks = 1
    ranks = Ranks()   # this process's place in a data-parallel run (set by the trainer)
    # Whether the next epoch's pass may be drawn before this epoch's row is complete (prefetch_next_epoch):
    # begin_epoch reads nothing that evaluation or the row changes, and reports nothing in the row.
    draws_ahead = True

    def __init__(self, cfg: TrainConfig) -> None:
        super().__init__()
        self.cfg = cfg

    def pair_loss(self) -> nn.Module:
        """The PML loss over (anchor, positive, negative) pairs, in the batch and against the memory."""
        raise NotImplementedError

    def miner(self) -> Optional[nn.Module]:
        """The pair miner (None: every pair enters the loss)."""
        return None

    def sampler(self, labels: Tensor) -> Sampler:
        """Training-set indices for one pass (``labels`` only for objectives that use them)."""
        raise NotImplementedError

    def dataset(self, train: Dataset) -> Dataset:
        """What the loader reads: ``train`` (one view per drawn index) or a wrapper of it."""
        return train

    def forward(self, model: nn.Module, x: Tensor, y: Tensor, idx: Tensor, prepare: Callable,
                runtime) -> Batch:
        raise NotImplementedError

    def after_step(self, model: nn.Module) -> None:
        """Called after each optimiser step."""

    def begin_epoch(self, epoch_index: int, embed_training_set: Callable[[], Tensor], sampler: Sampler) -> None:
        """Called before each pass over the data (``epoch_index`` 0-based; -1 for the warm-up):
        ``embed_training_set()`` gives the current embeddings of every training image (eval transform)."""

    def epoch_metrics(self) -> dict[str, float]:
        """Objective-specific figures for the epoch's metrics row."""
        return {}


def embed_views(model: nn.Module, x: Tensor, prepare: Callable, runtime, splits: int = 1) -> Tensor:
    """``model(prepare(x))`` under the run's autocast, in ``splits`` consecutive sub-batches (each with its own
    BatchNorm statistics, as on as many devices)."""
    x = prepare(x)
    with runtime.autocast():
        if splits == 1:
            return model(x)
        return torch.cat([model(part) for part in x.chunk(splits)])
