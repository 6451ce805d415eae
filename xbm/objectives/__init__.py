"""Training objectives (config key ``objective``): how batches are drawn and what the pair loss calls a class.

``supervised`` (the default, class labels), and three label-free ones that never read a training label:
``instance`` (instance discrimination, thesis seed 004 §3.1), ``moco`` (MoCo with the normaliser adapting its
queue, AXBN paper seed 001 App. B) and ``neighbours`` (neighbour-mined positives, thesis seed 004 §3.2).
All of them train against the same cross-batch memory and normalisers.
"""
from xbm.objectives.base import Batch, Objective
from xbm.objectives.registry import build_objective
from xbm.registries import OBJECTIVES

__all__ = ["Batch", "OBJECTIVES", "Objective", "build_objective"]
