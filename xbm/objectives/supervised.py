"""``objective=supervised``: the project's protocol (thesis seed 000 §5.2, AXBN paper seed 001 §5.1).

Batches of ``batch_size / samples_per_class`` classes (PML ``MPerClassSampler``), SupCon (PML ``SupConLoss``,
Khosla et al. 2020 Eq. 2, ``loss.temperature``) over the pairs PML's ``PairMarginMiner`` picks
(:mod:`xbm.training.criteria`), in the batch and against the memory.
"""
from __future__ import annotations

from torch import nn

from xbm.objectives.base import Batch, Objective, embed_views
from xbm.training.criteria import build_miner, build_supcon
from xbm.training.loaders import make_sampler


class Supervised(Objective):
    name = "supervised"
    uses_labels = True

    def pair_loss(self) -> nn.Module:
        return build_supcon(self.cfg.loss)

    def miner(self):
        return build_miner(self.cfg.miner)

    def sampler(self, labels):
        return make_sampler(labels, self.cfg)

    def forward(self, model, x, y, idx, prepare, runtime) -> Batch:
        return Batch(embed_views(model, x, prepare, runtime), y, idx, None)
