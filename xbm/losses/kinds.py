"""The pair losses' builders (``loss.kind``, named in :data:`xbm.registries.LOSSES`), each pytorch-metric-learning's loss.

- ``supcon``: SupCon (Khosla et al. 2020, Eq. 2), PML ``SupConLoss(temperature)`` without its host reads
  (:class:`xbm.losses.pair_masks.SupConLoss`), so it runs on pair masks.
- ``contrastive``: the contrastive loss (Hadsell et al. 2006; the XBM paper's, seed 002 §3.1 "Contrastive loss"
  and Table 1), PML ``ContrastiveLoss(pos_margin, neg_margin)``. On ``loss.distance=cosine`` (the XBM code's
  similarity form) it is ``[pos_margin - S_ij]_+`` per positive and ``[S_ij - neg_margin]_+`` per negative pair
  (the paper's lambda is neg_margin, 0.5 in its code); on ``lp`` ``[d_ij - pos_margin]_+`` / ``[neg_margin - d_ij]_+``.
  PML averages each over its pairs with a non-zero loss and sums the two; ``loss.reduction=per_anchor`` sums every
  pair's loss over the number of anchors, as the XBM paper's Eq. 1 and code (:mod:`xbm.losses.reducers`).
- ``triplet``: the triplet loss (Schroff et al. 2015; seed 002 §3.1, Table 1), PML ``TripletMarginLoss(margin)``,
  ``[d_ap - d_an + margin]_+`` over every triplet built from the mined (or all) pairs sharing an anchor.
- ``multi_similarity``: MS (Wang et al. 2019, Eq. 8; seed 002 §3.1, Table 1), PML
  ``MultiSimilarityLoss(alpha, beta, base)``; with ``loss.ms_mining`` its own pair mining (MS Eq. 3-4, PML
  ``MultiSimilarityMiner(ms_epsilon)``), which :func:`own_miner` returns.
- ``ntxent``: NT-Xent (Chen et al. 2020, SimCLR Eq. 1), PML ``NTXentLoss(temperature)``; with labels every other
  row of the anchor's class is a positive (each positive pair its own softmax).

With the memory each takes PML's index pairs (:class:`xbm.losses.xbm_loss.XBMLoss`), as in PML's ``CrossBatchMemory``; SupCon,
the contrastive loss and NT-Xent run on pair masks (:mod:`xbm.losses.pair_masks`: the same numbers without host reads).
"""
from __future__ import annotations

from typing import Optional

from pytorch_metric_learning import distances, losses, miners
from torch import nn

from xbm.losses.config import LossConfig
from xbm.losses.pair_masks import SupConLoss
from xbm.losses.reducers import PerAnchorSumReducer
from xbm.registries import LOSSES, LOSS_DISTANCES

# the builders of xbm.registries.LOSSES: LossConfig -> the loss (its distance from LOSS_DISTANCES)
def supcon(cfg: LossConfig) -> nn.Module:
    return SupConLoss(temperature=cfg.temperature)


def contrastive(cfg: LossConfig) -> nn.Module:
    reducer = PerAnchorSumReducer() if cfg.reduction == "per_anchor" else None   # None: PML's AvgNonZeroReducer
    return losses.ContrastiveLoss(pos_margin=cfg.pos_margin, neg_margin=cfg.neg_margin,
                                  distance=LOSS_DISTANCES[cfg.distance](), reducer=reducer)


def triplet(cfg: LossConfig) -> nn.Module:
    return losses.TripletMarginLoss(margin=cfg.margin, distance=LOSS_DISTANCES[cfg.distance]())


def multi_similarity(cfg: LossConfig) -> nn.Module:
    return losses.MultiSimilarityLoss(alpha=cfg.alpha, beta=cfg.beta, base=cfg.base)


def ntxent(cfg: LossConfig) -> nn.Module:
    return losses.NTXentLoss(temperature=cfg.temperature)


def build_loss(cfg: LossConfig) -> nn.Module:
    """The pair loss of ``cfg.kind``.

    Args:
        cfg: the run's ``loss.*`` options.

    Returns:
        The pytorch-metric-learning loss (ours for SupCon: :class:`xbm.losses.pair_masks.SupConLoss`).

    Raises:
        ValueError: ``cfg.kind`` is not in :data:`xbm.registries.LOSSES`.
    """
    return LOSSES.build(cfg.kind)(cfg)


def own_miner(cfg: LossConfig) -> Optional[nn.Module]:
    """The loss's own miner, which replaces ``miner.*`` (the config requires miner.kind none then): MS's pair
    mining (MS paper Eq. 3-4) with ``ms_mining``; None for every other loss."""
    if cfg.mines_itself:
        return miners.MultiSimilarityMiner(epsilon=cfg.ms_epsilon)
    return None
