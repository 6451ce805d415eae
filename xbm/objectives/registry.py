"""The objective registry (config key ``objective``) and ``build_objective``."""
from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from xbm.config import OBJECTIVES, TrainConfig
from xbm.objectives.base import Objective
from xbm.objectives.instance import Instance
from xbm.objectives.moco import MoCo
from xbm.objectives.neighbours import Neighbours
from xbm.objectives.supervised import Supervised

# name -> builder(cfg, model, train_labels); the model is MoCo's query encoder, copied into its key encoder
REGISTRY: dict[str, Callable[[TrainConfig, nn.Module, torch.Tensor], Objective]] = {
    "supervised": lambda cfg, model, labels: Supervised(cfg),
    "instance": lambda cfg, model, labels: Instance(cfg),
    "moco": lambda cfg, model, labels: MoCo(cfg, model),
    "neighbours": lambda cfg, model, labels: Neighbours(cfg, labels),
}
assert tuple(REGISTRY) == OBJECTIVES, "xbm.config.OBJECTIVES must list the registry's names"


def build_objective(cfg: TrainConfig, model: nn.Module, train_labels: torch.Tensor) -> Objective:
    if cfg.objective not in REGISTRY:
        raise ValueError(f"objective must be one of {list(REGISTRY)}, but got {cfg.objective!r}")
    return REGISTRY[cfg.objective](cfg, model, train_labels)
