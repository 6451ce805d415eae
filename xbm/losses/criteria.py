"""The losses of a run: the ``loss.kind`` pair loss (:mod:`xbm.losses.kinds`; SupCon by default) with
PML's ``PairMarginMiner`` (or the loss's own miner), in the batch only (warm-up, epochs before
``memory.start_epoch``, the no-memory baseline) or against the cross-batch memory (:class:`xbm.losses.xbm_loss.XBMLoss`).

Miner distances (``miner.distance``):

- ``lp``: PML's default ``LpDistance()``, Euclidean after L2-normalising the embeddings. Mines positives
  with d > pos_margin and negatives with d < neg_margin.
- ``lp_raw``: ``LpDistance(normalize_embeddings=False)``, Euclidean on the raw rows, which matters when
  adapted memory rows leave the unit sphere (thesis §3.1.5). Same directions as ``lp``.
- ``cosine``: ``CosineSimilarity()``: the margins are similarities and the direction flips: positives with
  s < pos_margin and negatives with s > neg_margin are mined (so pos_margin 0.8 / neg_margin 0.2 is the
  cosine analogue of lp's 0.2 / 0.8 only roughly: on the sphere d^2 = 2 - 2 s).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch
from pytorch_metric_learning import distances, losses, miners
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu
from torch import nn

from xbm.losses.config import LossConfig, MinerConfig, resolve_miner_kind
from xbm.losses.kinds import own_miner
from xbm.losses.pair_masks import loss_from_masks, pair_masks, supports_masks
from xbm.losses.valid_negatives import valid_negatives, valid_negatives_of_pairs
from xbm.registries import MINER_DISTANCES


def raw_lp_distance() -> distances.BaseDistance:
    """``miner.distance=lp_raw`` (xbm.registries.MINER_DISTANCES): Euclidean on the embeddings as they are."""
    return distances.LpDistance(normalize_embeddings=False)


def build_miner(cfg: MinerConfig) -> Optional[miners.PairMarginMiner]:
    """``miner.kind`` none -> no miner (SupCon over every pair); else the PairMarginMiner (``auto`` reaches here
    resolved, through ``TrainConfig`` or :func:`build_pair_miner`, unless no loss is known: SupCon's miner)."""
    if cfg.kind == "none":
        return None
    return miners.PairMarginMiner(pos_margin=cfg.pos_margin, neg_margin=cfg.neg_margin,
                                  distance=MINER_DISTANCES[cfg.distance]())


def build_pair_miner(loss: LossConfig, miner: MinerConfig) -> Optional[nn.Module]:
    """The loss's own miner (MS with ``loss.ms_mining``) or ``miner.*``'s.

    Args:
        loss: the run's ``loss.*`` options (``miner.kind=auto`` follows the loss).
        miner: the run's ``miner.*`` options.

    Returns:
        The miner, or None where the loss takes every pair.

    Raises:
        KeyError: ``miner.distance`` is not in :data:`xbm.registries.MINER_DISTANCES` (the config refuses it first).
    """
    mine = own_miner(loss)
    if mine is not None:
        return mine
    return build_miner(dataclasses.replace(miner, kind=resolve_miner_kind(miner.kind, loss)))


def memory_size(ratio: float, n_train: int) -> int:
    """M = ceil(ratio x n_train) rows (XBM paper §4.1 expresses memory as a share of the training set)."""
    return max(1, math.ceil(ratio * n_train))


class BatchLoss(nn.Module):
    """The in-batch pair loss with an optional miner, called like ``XBMLoss``: ``crit(emb, labels, epoch=, indices=)``.

    ``last_stats`` mirrors ``XBMLoss.last_stats``: ``batch_pos_pairs`` / ``batch_neg_pairs`` = pairs the loss
    sees (mined ones with a miner, else all), ``loss_pos_pairs`` = ``batch_pos_pairs``, and 0 for the memory;
    ``valid_neg_batch``: negatives with a non-zero gradient (:mod:`xbm.losses.valid_negatives`; NaN for a loss it
    does not define).
    With our SupCon or NT-Xent (and a PairMarginMiner or none) the pairs are masks (:mod:`xbm.losses.pair_masks`) and the
    counts 0-dim device tensors: no host read.
    """

    def __init__(self, loss: nn.Module, miner: Optional[nn.Module] = None) -> None:
        super().__init__()
        self.loss = loss
        self.miner = miner
        self.masks = supports_masks(loss, miner)
        self.last_stats: dict[str, torch.Tensor | float] = {}

    def forward(self, embeddings: torch.Tensor, labels: torch.Tensor, epoch: int = 0,
                indices: Optional[torch.Tensor] = None, enqueue_mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        # enqueue_mask (MoCo's keys) means nothing without a memory: every row is in the batch
        if self.masks:
            masks = pair_masks(self.miner, embeddings, labels)
            positives, negatives = masks.pos.sum(), masks.neg.sum()
            loss = loss_from_masks(self.loss, embeddings, None, masks)
            valid = valid_negatives(self.loss, self.miner, embeddings, None, masks).sum()
        else:
            # All pairs when there is no miner (what SupCon uses then), so the count means the same as XBMLoss's.
            tuples = self.miner(embeddings, labels) if self.miner is not None else lmu.get_all_pairs_indices(labels)
            positives, negatives = float(len(tuples[0])), float(len(tuples[2]))
            loss = self.loss(embeddings, labels, tuples)
            valid = valid_negatives_of_pairs(self.loss, embeddings, None, tuples)
            valid = float("nan") if valid is None else valid.sum()   # NaN: a loss without a definition
        self.last_stats = {"memory_pos_pairs": 0.0, "memory_neg_pairs": 0.0, "batch_pos_pairs": positives,
                           "batch_neg_pairs": negatives, "loss_pos_pairs": positives, "memory_fill": 0.0,
                           "valid_neg_memory": 0.0, "valid_neg_batch": valid}
        return loss
