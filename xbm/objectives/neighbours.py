"""``objective=neighbours``: positives mined from each image's nearest neighbours (thesis seed 004 §3.2,
InsCLR's "positive selection in mini-batches", Eq. 3.6-3.9).

- Candidate pool (step 1): every training image's ``neighbours.pool`` (250) most similar training images by
  inner product of the L2-normalised embeddings (faiss ``IndexFlatIP``), from the current model in eval mode
  with the evaluation transform; rebuilt before the first pass and every ``neighbours.refresh_epochs`` main
  epochs (:func:`xbm.objectives.pool.build_pool`).
- Batches (steps 2-3): ``batch_size / (k + 1)`` anchors drawn at random, each followed by its ``neighbours.k``
  (3) most similar pool members with similarity >= ``neighbours.threshold`` (0.95, Eq. 3.6); an anchor with
  fewer is completed with augmented views of itself (:class:`xbm.objectives.pool.NeighbourSampler`). Every
  row is augmented (Eq. 3.8).
- Labels: one pseudo-label per tuple, the anchor's training index; rows of other tuples are negatives (Eq. 3.7).
- Loss (Eq. 3.9): ``L = (1 - I_ij) [S_ij - lambda]_+ - I_ij S_ij`` on cosine similarities S, which is PML's
  ``ContrastiveLoss(pos_margin=1, neg_margin=lambda, distance=CosineSimilarity())`` up to the constant 1 per
  positive pair (``[1 - S]_+ = 1 - S``). ``lambda`` = ``neighbours.neg_margin``, 0.5 by default (the XBM
  paper's contrastive margin, seed 002 §4.1; the thesis does not give one). Against the memory, stored rows
  keep their tuple's pseudo-label.

``epoch_metrics``: ``neighbour_found_fraction``, the share of the k slots filled by real neighbours, and
``neighbour_precision``, the share of those neighbours of the anchor's true class. Only these diagnostics read
the training labels; batches and the loss never do.
"""
from __future__ import annotations

import math

import torch
from pytorch_metric_learning import distances, losses
from torch import nn

from xbm.objectives.base import Batch, Objective, embed_views
from xbm.objectives.pool import NeighbourSampler, build_pool


class Neighbours(Objective):
    name = "neighbours"
    draws_ahead = False   # begin_epoch rebuilds the pools and sets the row's neighbour_* figures

    def __init__(self, cfg, train_labels: torch.Tensor) -> None:
        super().__init__(cfg)
        self.k = cfg.neighbours.k
        self.register_buffer("pool_indices", torch.empty(0, 0, dtype=torch.long))
        self.register_buffer("pool_similarities", torch.empty(0, 0))
        self._train_labels = train_labels.cpu()  # diagnostics only (neighbour_precision)
        self._metrics: dict[str, float] = {}

    def pair_loss(self) -> nn.Module:
        return losses.ContrastiveLoss(pos_margin=1.0, neg_margin=self.cfg.neighbours.neg_margin,
                                      distance=distances.CosineSimilarity())

    def sampler(self, labels):
        n = self.cfg.neighbours
        return NeighbourSampler(len(labels), self.cfg.batch_size, n.k, n.threshold)

    def forward(self, model, x, y, idx, prepare, runtime) -> Batch:
        anchors = idx.view(-1, self.k + 1)[:, 0]
        labels = anchors.repeat_interleave(self.k + 1)
        return Batch(embed_views(model, x, prepare, runtime), labels, idx, None)

    def begin_epoch(self, epoch_index, embed_training_set, sampler) -> None:
        due = self.pool_indices.numel() == 0 or (epoch_index >= 0 and epoch_index % self.cfg.neighbours.refresh_epochs == 0)
        if due:   # on rank 0 only, its pools on every rank (data-parallel ranks: one pool, bit for bit)
            indices, similarities = build_pool(embed_training_set().float(), self.cfg.neighbours.pool) \
                if self.ranks.is_main else (None, None)
            if self.ranks.distributed:   # pickled through the CPU: a CUDA tensor would land on rank 0's GPU
                indices, similarities = self.ranks.broadcast_object(
                    (indices.cpu(), similarities.cpu()) if self.ranks.is_main else None)
            self.pool_indices = indices.to(self.pool_indices.device)
            self.pool_similarities = similarities.to(self.pool_similarities.device)
        sampler.pool = (self.pool_indices.cpu(), self.pool_similarities.cpu())
        self._metrics = self._pool_metrics()

    def _pool_metrics(self) -> dict[str, float]:
        """Over every image as an anchor: found fraction, and the precision of what was found."""
        sims, members = self.pool_similarities.cpu()[:, : self.k], self.pool_indices.cpu()[:, : self.k]
        found = sims >= self.cfg.neighbours.threshold
        labels = self._train_labels
        same = labels[members] == labels.view(-1, 1)
        n_found = int(found.sum())
        return {"neighbour_found_fraction": n_found / max(found.numel(), 1),
                "neighbour_precision": float((same & found).sum()) / n_found if n_found else math.nan}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        for name in ("pool_indices", "pool_similarities"):  # a saved pool has its own shape: take it
            if prefix + name in state_dict:
                setattr(self, name, torch.empty_like(state_dict[prefix + name], device=getattr(self, name).device))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def epoch_metrics(self) -> dict[str, float]:
        return dict(self._metrics)
