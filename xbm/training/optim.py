"""Optimisers and learning-rate schedule of the main phase, and the head-only warm-up's.

The protocol (seed 000 §5.2, seed 001 §5.1): a head-only warm-up (``warmup_epochs``) with SGD at lr 1e-3, then
``optimizer`` (AdamW by default) on the whole model with ``schedule`` stepped once per main epoch. The XBM code
(seed 002) trains with Adam or SGD, step decays and a linear lr warm-up; many DML recipes use cosine. With main
epoch e (0-based), base rate ``lr``:

- ``step`` (default): ``lr * lr_gamma ** floor(e / lr_step)`` (torch ``StepLR``, as before);
- ``cosine``: ``min_lr + (lr - min_lr) * (1 + cos(pi * e / epochs)) / 2`` (Loshchilov & Hutter 2017, SGDR Eq. 5,
  without restarts);
- ``multistep``: ``lr * lr_gamma ** |{m in milestones : m <= e}|``;
- ``warmup_lr_epochs = W`` > 0 replaces the schedule's first W epochs by a linear ramp of the whole model's rate,
  ``lr * (e + 1) / (W + 1)`` for e < W (so epoch W is the first at the schedule's own rate); distinct from the
  head-only ``warmup_epochs`` before the main phase.

Optimisers: ``adamw`` (decoupled weight decay), ``adam`` (``weight_decay`` as an L2 term in the gradient, as the
XBM code's Adam), ``sgd`` with ``momentum`` and ``nesterov``. Fused kernels on CUDA (:func:`fused`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from xbm.checks import parse_milestones
from xbm.config import SCHEDULES, TrainConfig
from xbm.registries import OPTIMIZERS

WARMUP_LR = 1e-3
WARMUP_MOMENTUM = 0.9


def fused(params: list[nn.Parameter]) -> bool:
    """Fused (one-kernel) optimiser steps when every parameter is on CUDA: fewer launches, and the step
    skips on the device when handed ``found_inf`` (xbm.training.epoch), so no host read guards it. On the
    CPU the default implementation, as before."""
    return bool(params) and all(p.is_cuda for p in params)


def warmup_optimizer(head: nn.Module) -> torch.optim.Optimizer:
    """SGD at lr 1e-3 on the head only (the backbone is frozen); momentum 0.9 is our choice."""
    params = list(head.parameters())
    return torch.optim.SGD(params, lr=WARMUP_LR, momentum=WARMUP_MOMENTUM, fused=fused(params) or None)


# the builders of xbm.registries.OPTIMIZERS: (params, lr, weight_decay, momentum, nesterov, fused) -> optimiser
def adamw(params, lr, wd, momentum, nesterov, f) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=wd, fused=f)


def adam(params, lr, wd, momentum, nesterov, f) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=lr, weight_decay=wd, fused=f)


def sgd(params, lr, wd, momentum, nesterov, f) -> torch.optim.Optimizer:
    return torch.optim.SGD(params, lr=lr, momentum=momentum, nesterov=nesterov, weight_decay=wd, fused=f)


def main_optimizer(model: nn.Module, optimizer: str, lr: float, weight_decay: float, momentum: float = 0.9,
                   nesterov: bool = False) -> torch.optim.Optimizer:
    """``optimizer`` over every parameter of the model (the run's config: :func:`optimizer_kwargs`)."""
    build = OPTIMIZERS.build(optimizer)
    params = list(model.parameters())
    return build(params, lr, weight_decay, momentum, nesterov, fused(params) or None)


def optimizer_kwargs(cfg: TrainConfig) -> dict:
    """The config keys :func:`main_optimizer` takes (timm's ``optimizer_kwargs`` -> ``create_optimizer_v2``)."""
    return dict(optimizer=cfg.optimizer, lr=cfg.lr, weight_decay=cfg.weight_decay, momentum=cfg.momentum,
                nesterov=cfg.nesterov)


@dataclass(frozen=True)
class LrFactor:
    """The rate of main epoch e as a factor of ``lr`` (see the module docstring); picklable, so that
    ``LambdaLR.state_dict`` keeps it. ``milestones`` only for multistep, ``min_factor`` = min_lr / lr."""

    schedule: str
    epochs: int
    warmup: int
    lr_step: int
    gamma: float
    milestones: tuple[int, ...] = ()
    min_factor: float = 0.0

    def __call__(self, e: int) -> float:
        if e < self.warmup:
            return (e + 1) / (self.warmup + 1)
        if self.schedule == "cosine":
            return self.min_factor + (1.0 - self.min_factor) * (1.0 + math.cos(math.pi * e / self.epochs)) / 2.0
        if self.schedule == "multistep":
            return self.gamma ** sum(1 for m in self.milestones if m <= e)
        return self.gamma ** (e // self.lr_step)


def main_scheduler(optimizer: torch.optim.Optimizer, schedule: str, epochs: int, lr_step: int, lr_gamma: float,
                   milestones: tuple[int, ...] = (), min_factor: float = 0.0,
                   warmup_lr_epochs: int = 0) -> torch.optim.lr_scheduler.LRScheduler:
    """The schedule of the main phase, stepped once per main epoch (the run's config: :func:`scheduler_kwargs`).
    Today's default (``step`` without an lr warm-up) stays torch's StepLR, so its numbers and checkpoints are
    unchanged; every other choice is a ``LambdaLR`` over :class:`LrFactor`."""
    if schedule not in SCHEDULES:
        raise ValueError(f"schedule must be one of {list(SCHEDULES)}, but got {schedule!r}")
    if schedule == "step" and warmup_lr_epochs == 0:
        return torch.optim.lr_scheduler.StepLR(optimizer, step_size=lr_step, gamma=lr_gamma)
    factor = LrFactor(schedule, epochs, warmup_lr_epochs, lr_step, lr_gamma, tuple(milestones), min_factor)
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def scheduler_kwargs(cfg: TrainConfig) -> dict:
    """The config keys :func:`main_scheduler` takes; ``min_factor`` = min_lr / lr."""
    return dict(schedule=cfg.schedule, epochs=cfg.epochs, lr_step=cfg.lr_step, lr_gamma=cfg.lr_gamma,
                milestones=parse_milestones(cfg.milestones) or (), min_factor=cfg.min_lr / cfg.lr,
                warmup_lr_epochs=cfg.warmup_lr_epochs)


def rescale_optimizer(optimizer: torch.optim.Optimizer, scheduler, lr: tuple[float, float],
                      weight_decay: tuple[float, float]) -> None:
    """After loading a run's optimiser and schedule saved with ``lr[0]`` / ``weight_decay[0]``, apply this
    run's ``lr[1]`` / ``weight_decay[1]`` (population-based training): every group's current and initial
    lr and the schedule's base lrs scale by lr[1] / lr[0], so the schedule keeps its progress (a StepLR
    after two decays stays two decays down, from the new lr); the weight decay is set. A no-op when equal."""
    (old_lr, new_lr), (old_wd, new_wd) = lr, weight_decay
    if new_lr != old_lr:
        ratio = new_lr / old_lr
        for group in optimizer.param_groups:
            group["lr"] *= ratio
            if "initial_lr" in group:
                group["initial_lr"] *= ratio
        if hasattr(scheduler, "base_lrs"):
            scheduler.base_lrs = [base * ratio for base in scheduler.base_lrs]
        if hasattr(scheduler, "_last_lr"):
            scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]
    if new_wd != old_wd:
        for group in optimizer.param_groups:
            group["weight_decay"] = new_wd


IMPLEMENTATION_KEYS = ("fused", "foreach", "capturable")  # the kernels a group steps with, not its hyperparameters


def load_optimizer_state(optimizer: torch.optim.Optimizer, state: dict) -> None:
    """``optimizer.load_state_dict(state)`` keeping this run's kernels. torch takes every saved group option,
    the kernel flags too, while ``_step_supports_amp_scaling`` stays the constructor's: a CPU checkpoint resumed
    on CUDA would hand ``found_inf`` to the plain kernel (an AssertionError at the first step), and a CUDA one
    resumed on the CPU would step with the CPU's fused kernel. The flags are set before the load, so torch
    places each ``step`` counter where this run's kernels want it."""
    if len(state["param_groups"]) != len(optimizer.param_groups):
        raise ValueError(f"the checkpoint's optimiser has {len(state['param_groups'])} parameter groups, this run's "
                         f"{len(optimizer.param_groups)}: it was saved by another model or optimiser")
    groups = [{**saved, **{key: own[key] for key in IMPLEMENTATION_KEYS if key in own}}
              for saved, own in zip(state["param_groups"], optimizer.param_groups)]
    optimizer.load_state_dict({**state, "param_groups": groups})
