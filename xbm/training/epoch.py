"""One pass over the training loader: forward under autocast, loss in fp32, a finiteness check before the
optimiser sees anything, backward through the GradScaler, gradient clipping by norm after unscaling.

    z, labels, i, mask = objective(model, x, y, i, prepare, runtime)  # z: [n, d] embeddings, maybe fp16/bf16
    loss = crit(z.float(), labels, epoch=e, indices=i, enqueue_mask=mask)
    if not finite(loss): raise NonFiniteLossError     # before backward: no NaN reaches the weights
    scaler.scale(loss).backward(); scaler.unscale_(opt); clip_grad_norm_(params, clip_grad)
    scaler.step(opt); scaler.update(); objective.after_step(model)
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import nn

from xbm.errors import NonFiniteLossError
from xbm.training.runtime import Runtime

# Pair counts per iteration (the criterion's ``last_stats``): mined against the memory, within the batch,
# and the positive pairs that entered the loss. An epoch whose loss saw no positive pair has collapsed:
# SupCon without positives is exactly 0 and teaches nothing (issue 8).
STAT_NAMES = ("memory_pos_pairs", "memory_neg_pairs", "batch_pos_pairs", "batch_neg_pairs", "loss_pos_pairs")


@dataclass
class EpochResult:
    """Mean loss and mean pair counts per iteration (``pairs``, by :data:`STAT_NAMES`), images seen,
    seconds spent training, final memory fill."""

    loss: float
    images: int
    iterations: int
    seconds: float
    pairs: dict
    memory_fill: float
    data_wait_s: float = 0.0

    @property
    def collapsed(self) -> bool:
        """No positive pair reached the loss in the whole epoch."""
        return self.iterations > 0 and self.pairs["loss_pos_pairs"] == 0

    @property
    def images_per_s(self) -> float:
        return self.images / self.seconds if self.seconds > 0 else math.nan


@dataclass
class Step:
    """What one optimiser step needs besides the batch."""

    model: nn.Module
    objective: nn.Module  # xbm.objectives.Objective: the batch -> embeddings and the loss's labels
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler
    params: list[torch.nn.Parameter]
    clip_grad: float
    prepare: Callable = lambda x: x  # the batch on its device -> the model's input (e.g. uint8 -> normalised)


def run_epoch(step: Step, loader: Iterable, runtime: Runtime, epoch: int, epoch_index: int) -> EpochResult:
    """Train over ``loader`` once; ``epoch`` (1-based, 0 = warm-up) names errors, ``epoch_index`` (0-based)
    goes to the criterion (normaliser delay, memory)."""
    loss_sum, images, iterations = 0.0, 0, 0
    pair_sums = {name: 0.0 for name in STAT_NAMES}
    fill = 0.0
    runtime.synchronize()
    start = time.perf_counter()
    waited = 0.0
    batches = iter(loader)
    while True:
        asked = time.perf_counter()
        batch = next(batches, None)
        waited += time.perf_counter() - asked
        if batch is None:
            break
        iterations += 1
        x, y, idx = batch
        x = runtime.to_device(x)
        y = y.to(runtime.device, non_blocking=True)
        idx = idx.to(runtime.device, non_blocking=True)
        z, labels, indices, enqueue_mask = step.objective(step.model, x, y, idx, step.prepare, runtime)
        loss = step.criterion(z.float(), labels, epoch=epoch_index, indices=indices, enqueue_mask=enqueue_mask)
        value = loss.item()  # one sync per step: the finiteness check must precede every update
        if not math.isfinite(value):
            raise NonFiniteLossError(epoch, iterations, value)
        step.optimizer.zero_grad(set_to_none=True)
        step.scaler.scale(loss).backward()
        if step.clip_grad > 0:
            step.scaler.unscale_(step.optimizer)
            torch.nn.utils.clip_grad_norm_(step.params, step.clip_grad)
        step.scaler.step(step.optimizer)
        step.scaler.update()
        step.objective.after_step(step.model)
        loss_sum += value
        images += len(y)
        stats = step.criterion.last_stats
        for name in STAT_NAMES:
            pair_sums[name] += float(stats.get(name, 0))
        fill = stats.get("memory_fill", 0.0)
    runtime.synchronize()
    seconds = time.perf_counter() - start
    n = max(iterations, 1)
    return EpochResult(loss=loss_sum / n if iterations else math.nan, images=images, iterations=iterations,
                       seconds=seconds, pairs={name: total / n for name, total in pair_sums.items()},
                       memory_fill=float(fill), data_wait_s=waited)
