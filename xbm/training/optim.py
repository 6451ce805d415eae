"""Optimisers and learning-rate schedule of the protocol (seed 000 §5.2, seed 001 §5.1): a head-only
warm-up with SGD at lr 1e-3, then AdamW(lr, weight_decay) on the whole model with StepLR(lr_step, lr_gamma)
stepped once per main epoch."""
from __future__ import annotations

import torch
from torch import nn

from xbm.config import TrainConfig

WARMUP_LR = 1e-3
WARMUP_MOMENTUM = 0.9


def warmup_optimizer(head: nn.Module) -> torch.optim.Optimizer:
    """SGD at lr 1e-3 on the head only (the backbone is frozen); momentum 0.9 is our choice."""
    return torch.optim.SGD(head.parameters(), lr=WARMUP_LR, momentum=WARMUP_MOMENTUM)


def main_optimizer(model: nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)


def main_scheduler(optimizer: torch.optim.Optimizer, cfg: TrainConfig) -> torch.optim.lr_scheduler.StepLR:
    """lr_e = lr * lr_gamma ** floor(e / lr_step) in 0-based main epoch e."""
    return torch.optim.lr_scheduler.StepLR(optimizer, step_size=cfg.lr_step, gamma=cfg.lr_gamma)
