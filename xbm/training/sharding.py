"""Data parallelism that computes the one-worker run: each rank's share of every global batch, and the
global batch rebuilt around each rank's own rows for the loss, the memory and the normaliser.

Batches: every rank draws the same global sequence (one seeded sampler, the same RNG state on every rank)
and keeps rows ``[r b, (r + 1) b)`` of each global batch of B rows, b = B / N (:class:`ShardedSampler`).
PK batches list their samples class by class (PML's ``MPerClassSampler`` writes ``samples_per_class`` rows
per class, one class after the other), so with b a multiple of ``samples_per_class`` a rank holds whole classes.

Loss (:class:`GatheredCriterion`): each rank gathers every rank's detached embeddings, labels and indices
(rank order; the enqueue flags are the objective's layout, the same on every rank, so they are repeated on
the host), puts its own live rows back in their place, and calls the one-worker criterion
on that global batch. Every rank thus computes the same memory update, normaliser moments and loss value
L as the one-worker run, with a gradient through its own rows z_r only: ``dL/dz_r``. The one-worker gradient
is ``sum_r dL/dz_r dz_r/dtheta``; DDP averages the ranks' gradients (divides by N), so the own rows' gradient
is multiplied by N first (:func:`scale_grad`): ``(1/N) sum_r N dL/dz_r dz_r/dtheta``, the one-worker
gradient for every loss kind and reducer (no per-reducer normaliser to all-reduce).
"""
from __future__ import annotations

from typing import Iterator, Optional

import torch
from torch import Tensor, nn

from xbm.training.distributed import Ranks
from xbm.training.loaders import SeededSampler


class ShardedSampler(SeededSampler):
    """:class:`SeededSampler` over the global sequence of ``sampler``, keeping this rank's contiguous
    ``batch_size / world_size`` rows of each global batch of ``batch_size`` (global positions keep their
    augmentation seeds, so a rank's rows are augmented as in the one-worker run)."""

    def __init__(self, sampler, seed: int, batch_size: int, ranks: Ranks) -> None:
        super().__init__(sampler, seed)
        if batch_size % ranks.world_size:
            raise ValueError(f"batch_size must be a multiple of the workers ({ranks.world_size}), but got {batch_size}")
        self.batch_size, self.ranks = batch_size, ranks
        self.share = batch_size // ranks.world_size

    def __len__(self) -> int:
        return len(self.sampler) // self.batch_size * self.share

    def __iter__(self) -> Iterator[tuple[int, int]]:
        drawn = list(super().__iter__())
        start = self.ranks.rank * self.share
        for first in range(0, len(drawn) - self.batch_size + 1, self.batch_size):
            yield from drawn[first + start: first + start + self.share]


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, factor: float) -> Tensor:
        ctx.factor = factor
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return grad * ctx.factor, None


def scale_grad(x: Tensor, factor: float) -> Tensor:
    """``x`` itself in the forward pass; its gradient multiplied by ``factor`` in the backward pass."""
    return x if factor == 1 else _ScaleGrad.apply(x, factor)


def to_global_order(rows: Tensor, world_size: int, blocks: int) -> Tensor:
    """Rank-ordered gathered rows [N * n, ...] -> the one-worker batch's order. A rank's n rows are ``blocks``
    consecutive blocks (MoCo and instance: first views, then second views of its images); the one-worker
    batch holds block 0 of every rank, then block 1 of every rank, ...: [N, V, n/V] -> [V, N, n/V]."""
    if blocks == 1 or world_size == 1:
        return rows
    shape = rows.shape
    per = shape[0] // (world_size * blocks)
    return rows.reshape(world_size, blocks, per, *shape[1:]).transpose(0, 1).reshape(shape)


class GatheredCriterion(nn.Module):
    """The one-worker criterion (``BatchLoss`` or ``XBMLoss``) on the global batch rebuilt from every rank's
    rows, with this rank's rows live (their gradient times N, see the module docstring) and the others'
    detached. Called like the criterion; ``last_stats`` are the criterion's (global: the same on every rank)."""

    def __init__(self, inner: nn.Module, ranks: Ranks, blocks: int = 1) -> None:
        super().__init__()
        self.inner, self.ranks, self.blocks = inner, ranks, blocks

    @property
    def last_stats(self):
        return self.inner.last_stats

    def forward(self, embeddings: Tensor, labels: Tensor, epoch: int = 0, indices: Optional[Tensor] = None,
                enqueue_mask: Optional[Tensor] = None) -> Tensor:
        ranks, n = self.ranks, len(embeddings)
        rows = list(ranks.gather(embeddings.detach()).split(n))
        rows[ranks.rank] = scale_grad(embeddings, float(ranks.world_size))
        keys = [labels.long(), indices.long() if indices is not None else torch.full_like(labels, -1, dtype=torch.long)]
        gathered = ranks.gather(torch.stack(keys, dim=1))   # one collective for labels and indices
        order = lambda t: to_global_order(t, ranks.world_size, self.blocks)  # noqa: E731
        gathered = order(gathered).t().contiguous()   # one contiguous row per column (searchsorted wants it)
        if enqueue_mask is not None:   # the objective's layout, the same on every rank: gathered on the host
            enqueue_mask = order(enqueue_mask.cpu().repeat(ranks.world_size))
        return self.inner(order(torch.cat(rows)), gathered[0], epoch=epoch,
                          indices=gathered[1] if indices is not None else None, enqueue_mask=enqueue_mask)
