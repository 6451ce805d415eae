"""One pass over the training loader: forward under autocast, loss in fp32, a finiteness check that no NaN
passes into the weights, backward through the GradScaler, gradient clipping by norm after unscaling.

    z, labels, i, mask = objective(model, x, y, i, prepare, runtime)  # z: [n, d] embeddings, maybe fp16/bf16
    loss = crit(z.float(), labels, epoch=e, indices=i, enqueue_mask=mask)
    check finite(loss)                                 # the step's one host synchronisation (below)
    scaler.scale(loss).backward(); scaler.unscale_(opt); clip_grad_norm_(params, clip_grad)
    scaler.step(opt); scaler.update(); objective.after_step(model)

At most one host synchronisation per step; losses and pair counts are summed on the device and read once,
at the end of the epoch. Where the check happens depends on the optimiser:

- a fused optimiser (``fused=True``: CUDA) without loss scaling skips a step on the device: it is handed
  ``found_inf`` = not finite(loss), as the GradScaler hands it its inf check, and leaves the weights, its
  moments and its step count as they were. The flag is read one step late, after the next step's forward
  is queued, so the CPU never waits for the GPU in the middle of a step; the error names the bad iteration.
- any other optimiser cannot skip on the device: the flag is read before backward (the CPU waits for the
  forward), so the NaN step never reaches it.

Either way a non-finite loss raises :class:`~xbm.errors.NonFiniteLossError` (epoch, first bad iteration,
value) before any later step updates the weights, and the weights never see it.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import torch
from torch import nn

from xbm.errors import NonFiniteLossError
from xbm.runtime.device import Runtime

# Pair counts per iteration (the criterion's ``last_stats``): mined against the memory, within the batch,
# and the positive pairs that entered the loss. An epoch whose loss saw no positive pair has collapsed:
# SupCon without positives is exactly 0 and teaches nothing. Then the valid negatives (XBM paper Fig. 4: those
# with a non-zero gradient, xbm.losses.valid_negatives) from the memory and from the batch.
STAT_NAMES = ("memory_pos_pairs", "memory_neg_pairs", "batch_pos_pairs", "batch_neg_pairs", "loss_pos_pairs",
              "valid_neg_memory", "valid_neg_batch")


@dataclass
class EpochResult:
    """Mean loss and mean pair counts per iteration (``pairs``, by :data:`STAT_NAMES`), images seen,
    seconds spent training (the training pass's wall time, ``train_s``), final memory fill, and
    ``data_wait_s``: the part of ``seconds`` spent blocked waiting for the loader's next batch."""

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
    # after backward, before clipping: a data-parallel step outside DDP averages its gradients over the ranks
    sync_grads: Optional[Callable[[], None]] = None
    # after the step, between steps: e.g. drift at Δt iterations (xbm.evaluate.step_drift), which embeds a probe
    on_step: Optional[Callable[[], None]] = None
    # before the first batch, on the pass's clock (train_s): e.g. the probe snapshot a drift measurement starts from
    on_begin: Optional[Callable[[], None]] = None


def skips_on_device(step: Step) -> bool:
    """Whether the optimiser can skip a step on the device (fused kernels take ``found_inf``, as from the
    GradScaler) and nothing else sets that flag (a GradScaler that scales, fp16, sets its own)."""
    return bool(getattr(step.optimizer, "_step_supports_amp_scaling", False)) and not step.scaler.is_enabled()


class _Sums:
    """Per-epoch sums kept where the values are: host numbers on the host, device tensors on the device
    (float64, in step order, as Python's float sums). ``read()`` reads every device sum in one transfer."""

    def __init__(self) -> None:
        self.host: dict[str, float] = {}
        self.device: dict[str, torch.Tensor] = {}

    def add(self, name: str, value) -> None:
        if isinstance(value, torch.Tensor):
            value = value.detach().to(torch.float64)
            self.device[name] = self.device[name] + value if name in self.device else value
        else:
            self.host[name] = self.host.get(name, 0.0) + float(value)

    def read(self) -> dict[str, float]:
        names = list(self.device)
        values = torch.stack([self.device[n] for n in names]).tolist() if names else []
        totals = dict(self.host)
        for name, value in zip(names, values):
            totals[name] = totals.get(name, 0.0) + value
        return totals


def run_epoch(step: Step, loader: Iterable, runtime: Runtime, epoch: int, epoch_index: int) -> EpochResult:
    """Train over ``loader`` once; ``epoch`` (1-based, 0 = warm-up) names errors, ``epoch_index`` (0-based)
    goes to the criterion (normaliser delay, memory)."""
    on_device = skips_on_device(step)
    sums = _Sums()
    images, iterations, fill, waited = 0, 0, 0.0, 0.0
    pending = None  # (iteration, loss, finite) of the previous step, checked one step late (on_device)
    runtime.synchronize()
    start = time.perf_counter()
    if step.on_begin is not None:
        step.on_begin()
    batches = iter(loader)
    while True:
        before = time.perf_counter()
        batch = next(batches, None)
        waited += time.perf_counter() - before
        if batch is None:
            break
        iterations += 1
        x, y, idx = batch
        x = runtime.to_device(x)
        y = y.to(runtime.device, non_blocking=True)
        idx = idx.to(runtime.device, non_blocking=True)
        z, labels, indices, enqueue_mask = step.objective(step.model, x, y, idx, step.prepare, runtime)
        loss = step.criterion(z.float(), labels, epoch=epoch_index, indices=indices, enqueue_mask=enqueue_mask)
        finite = torch.isfinite(loss.detach())
        if on_device:
            _raise_if_bad(pending, epoch)   # the one sync: the previous step, while this forward runs
            pending = (iterations, loss.detach(), finite)
        else:
            _raise_if_bad((iterations, loss.detach(), finite), epoch)   # the one sync, before backward
        _update(step, loss, finite, on_device)
        step.objective.after_step(step.model)
        if step.on_step is not None:
            step.on_step()
        sums.add("loss", loss)
        images += len(y)
        stats = step.criterion.last_stats
        for name in STAT_NAMES:
            sums.add(name, stats.get(name, 0))
        fill = stats.get("memory_fill", 0.0)
    _raise_if_bad(pending, epoch)
    totals = sums.read()
    runtime.synchronize()
    seconds = time.perf_counter() - start
    n = max(iterations, 1)
    return EpochResult(loss=totals["loss"] / n if iterations else math.nan, images=images, iterations=iterations,
                       seconds=seconds, pairs={name: totals.get(name, 0.0) / n for name in STAT_NAMES},
                       memory_fill=float(fill), data_wait_s=waited)


def _update(step: Step, loss: torch.Tensor, finite: torch.Tensor, on_device: bool) -> None:
    """One optimiser update from ``loss``: backward (scaled), the ranks' gradients averaged, clipping, the step;
    ``on_device``: a non-finite loss skips the update on the device (``found_inf``) instead of a host read."""
    step.optimizer.zero_grad(set_to_none=True)
    step.scaler.scale(loss).backward()
    if step.sync_grads is not None:
        step.sync_grads()
    if step.clip_grad > 0:
        step.scaler.unscale_(step.optimizer)
        torch.nn.utils.clip_grad_norm_(step.params, step.clip_grad)
    if on_device:
        step.optimizer.found_inf = (~finite).float()   # fused kernels skip the update where it is 1
    try:
        step.scaler.step(step.optimizer)
    finally:
        if on_device:
            del step.optimizer.found_inf
    step.scaler.update()


def _raise_if_bad(pending, epoch: int) -> None:
    """Raise NonFiniteLossError for a step whose loss was not finite (``pending``: iteration, loss, flag)."""
    if pending is not None and not bool(pending[2]):
        raise NonFiniteLossError(epoch, pending[0], float(pending[1]))
