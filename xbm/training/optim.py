"""Optimisers and learning-rate schedule of the protocol (seed 000 §5.2, seed 001 §5.1): a head-only
warm-up with SGD at lr 1e-3, then AdamW(lr, weight_decay) on the whole model with StepLR(lr_step, lr_gamma)
stepped once per main epoch."""
from __future__ import annotations

import torch
from torch import nn

from xbm.config import TrainConfig

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


def main_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    params = list(model.parameters())
    return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=fused(params) or None)


def main_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.StepLR:
    """lr_e = lr * lr_gamma ** floor(e / lr_step) in 0-based main epoch e."""
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.lr_step, gamma=cfg.lr_gamma)


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
