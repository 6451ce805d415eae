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
