"""``objective=supervised``: the project's protocol (thesis seed 000 §5.2, AXBN paper seed 001 §5.1).

Batches of ``batch_size / samples_per_class`` classes (PML ``MPerClassSampler``; ``sampler=random``: a shuffle of the
training images, :class:`~xbm.objectives.views.ShuffledIndices`, XBM paper seed 002 Fig. 6), the ``loss.kind`` pair loss
(SupCon by default: PML ``SupConLoss``, Khosla et al. 2020 Eq. 2, ``loss.temperature``; the others in
:mod:`xbm.losses.kinds`) over the pairs PML's ``PairMarginMiner`` picks, or the loss's own miner
(:mod:`xbm.losses.criteria`), in the batch and against the memory.
"""
from __future__ import annotations

from torch import nn

from xbm.objectives.base import Batch, Objective, embed_views
from xbm.objectives.views import ShuffledIndices
from xbm.losses.criteria import build_pair_miner
from xbm.losses.kinds import build_loss
from xbm.training.loaders import make_sampler


class Supervised(Objective):
    name = "supervised"
    uses_labels = True

    def pair_loss(self) -> nn.Module:
        return build_loss(self.cfg.loss)

    def miner(self):
        return build_pair_miner(self.cfg.loss, self.cfg.miner)

    def sampler(self, labels):
        if self.cfg.sampler == "random":   # each image once per pass, classes as they fall
            return ShuffledIndices(len(labels), self.cfg.batch_size)
        return make_sampler(labels, self.cfg)

    def forward(self, model, x, y, idx, prepare, runtime) -> Batch:
        return Batch(embed_views(model, x, prepare, runtime), y, idx, None)
