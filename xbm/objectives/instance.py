"""``objective=instance``: instance discrimination (thesis seed 004 §3.1; Ye et al., "Unsupervised Embedding
Learning via Invariant and Spreading Instance Feature", CVPR 2019).

Each batch holds ``batch_size`` images drawn at random and two augmented views of each (``2 x batch_size``
rows; the thesis pairs each image with one augmentation of it, Eq. 3.1-3.5). Every image is its own class:
the label of both views is the image's training index, so a view's positive is the other view and every
other row is a negative. The loss is PML's ``NTXentLoss(loss.temperature)``; against the memory (and its
normaliser) the stored rows of other images are extra negatives and the stored views of the same image
(this batch's, and older ones still in the memory) extra positives.
"""
from __future__ import annotations

import torch

from xbm.objectives.base import Batch, embed_views
from xbm.objectives.views import TwoViewObjective


class Instance(TwoViewObjective):
    name = "instance"

    def forward(self, model, x, y, idx, prepare, runtime) -> Batch:
        views = torch.cat([x[:, 0], x[:, 1]])  # [2B, ...]: first views, then second views
        ids = torch.cat([idx, idx])
        return Batch(embed_views(model, views, prepare, runtime), ids, ids, None)
