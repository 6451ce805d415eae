"""The objectives' builders (config key ``objective``, named in :data:`xbm.registries.OBJECTIVES`) and
``build_objective``."""
from __future__ import annotations

import torch
from torch import nn

from xbm.config import TrainConfig
from xbm.objectives.base import Objective
from xbm.objectives.instance import Instance
from xbm.objectives.moco import MoCo
from xbm.objectives.neighbours import Neighbours
from xbm.objectives.supervised import Supervised
from xbm.registries import OBJECTIVES

# the builders of xbm.registries.OBJECTIVES: (cfg, model, train_labels) -> Objective; the model is MoCo's query
# encoder, copied into its key encoder
def supervised(cfg: TrainConfig, model: nn.Module, labels: torch.Tensor) -> Objective:
    return Supervised(cfg)


def instance(cfg: TrainConfig, model: nn.Module, labels: torch.Tensor) -> Objective:
    return Instance(cfg)


def moco(cfg: TrainConfig, model: nn.Module, labels: torch.Tensor) -> Objective:
    return MoCo(cfg, model)


def neighbours(cfg: TrainConfig, model: nn.Module, labels: torch.Tensor) -> Objective:
    return Neighbours(cfg, labels)


def build_objective(cfg: TrainConfig, model: nn.Module, train_labels: torch.Tensor) -> Objective:
    """The run's objective (config key ``objective``).

    Args:
        cfg: the run's config.
        model: the embedding model (MoCo copies it into its key encoder).
        train_labels: the training set's labels, one per image (the label-free objectives never read them
            to train; ``neighbours`` counts its mined positives' purity against them).

    Returns:
        The objective, which draws the batches' labels for the pair loss.

    Raises:
        ValueError: ``cfg.objective`` is not in :data:`xbm.registries.OBJECTIVES`.
    """
    return OBJECTIVES.build(cfg.objective)(cfg, model, train_labels)
