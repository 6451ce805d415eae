"""Data for label-free objectives: a random pass over the images, and two augmented views of each.

:class:`ShuffledIndices` draws a permutation of the training set per pass from NumPy's global RNG, as PML's
``MPerClassSampler`` does for the supervised objective, so the trainer's checkpointed RNG state resumes it.
:class:`TwoViews` returns two independently augmented views of each drawn image, the second one seeded from
the first's seed (:class:`xbm.training.loaders.SeededSampler`), so the views too never depend on workers.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np
import torch
from pytorch_metric_learning import losses
from torch import nn
from torch.utils.data import Dataset, Sampler

from xbm.objectives.base import Objective

# An LCG step (Knuth's MMIX constants): the second view's seed, a fixed function of the first's.
_A, _C = 6364136223846793005, 1442695040888963407


def second_seed(seed: int) -> int:
    return (seed * _A + _C) % 2**63


class ShuffledIndices(Sampler):
    """A permutation of ``range(n)`` per pass, cut to whole batches of ``batch_size``."""

    def __init__(self, n: int, batch_size: int) -> None:
        if batch_size > n:
            raise ValueError(f"batch_size must be <= the {n} training images, but got batch_size={batch_size}; "
                             "lower batch_size")
        self.n, self.batch_size = n, batch_size

    def __len__(self) -> int:
        return self.n // self.batch_size * self.batch_size

    def __iter__(self) -> Iterator[int]:
        return iter(np.random.permutation(self.n)[: len(self)].tolist())


class TwoViews(Dataset):
    """Item ``(i, seed)`` -> ``(stack([view_1, view_2]), label, i)``: two draws of ``dataset``'s transform.
    Vectors have no augmentation: their two views are equal."""

    def __init__(self, dataset: Dataset) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, item):
        i, seed = item if isinstance(item, tuple) else (item, None)
        first, label, index = self.dataset[(i, seed) if seed is not None else i]
        second = self.dataset[(i, second_seed(int(seed))) if seed is not None else i][0]
        return torch.stack([torch.as_tensor(first), torch.as_tensor(second)]), label, index


class TwoViewObjective(Objective):
    """Base of ``instance`` and ``moco``: random passes over the images, two views of each, and PML's
    ``NTXentLoss(loss.temperature)`` over every pair (the two views of an image share its label)."""

    blocks = 2

    def pair_loss(self) -> nn.Module:
        return losses.NTXentLoss(temperature=self.cfg.loss.temperature)

    def sampler(self, labels):
        return ShuffledIndices(len(labels), self.cfg.batch_size)

    def dataset(self, train):
        return TwoViews(train)
