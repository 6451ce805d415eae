"""The ``loss.*`` and ``miner.*`` sections of the training config (torch-free: ``xbm.config`` reads them, as every
command does)."""
from __future__ import annotations

from dataclasses import dataclass

from xbm.checks import checker
from xbm.registries import LOSS_DISTANCES, LOSSES, MINER_DISTANCES

MINER_KINDS = ("auto", "pair_margin", "none")   # auto: follows the loss (resolve_miner_kind)
#: how the contrastive loss reduces its pairs: PML's mean over the pairs with a non-zero loss (default), or the
#: XBM paper's sum per anchor averaged over the anchors (Eq. 1; xbm.losses.reducers)
LOSS_REDUCTIONS = ("nonzero_pairs", "per_anchor")

_check = checker()


@dataclass(frozen=True)
class MinerConfig:
    """PML PairMarginMiner. With ``cosine`` the margins are similarities: positives below pos_margin
    and negatives above neg_margin are mined (the direction flips). ``kind`` ``auto`` (default) follows the
    loss (:func:`resolve_miner_kind`, applied by ``TrainConfig``, which records the resolved kind)."""

    kind: str = "auto"
    distance: str = "lp"
    pos_margin: float = 0.2
    neg_margin: float = 0.8

    def __post_init__(self) -> None:
        _check(self.kind in MINER_KINDS, "miner.kind", f"one of {list(MINER_KINDS)}", self.kind)
        _check(self.distance in MINER_DISTANCES, "miner.distance", f"one of {list(MINER_DISTANCES)}", self.distance)


@dataclass(frozen=True)
class LossConfig:
    """The pair loss of ``objective=supervised`` (``kind``; each is pytorch-metric-learning's, see
    :mod:`xbm.losses.kinds` for the papers):

    - ``supcon`` (default): SupCon, ``temperature``;
    - ``contrastive``: ``pos_margin`` / ``neg_margin`` on ``distance``: with ``cosine`` (similarity form, the
      XBM code's: positives below pos_margin and negatives above neg_margin are penalised) pos_margin >
      neg_margin; with ``lp`` (distance form) neg_margin > pos_margin;
    - ``triplet``: ``margin`` on ``distance``;
    - ``multi_similarity``: ``alpha``, ``beta``, ``base``; ``ms_mining`` on: MS's own pair mining
      (``MultiSimilarityMiner(ms_epsilon)``, which then replaces ``miner.*``: miner.kind must be none or auto);
    - ``ntxent``: NT-Xent, ``temperature``.

    ``reduction`` (contrastive only): ``nonzero_pairs`` (default, PML's: the mean of the positive pairs' losses
    that are > 0 plus the same for the negatives) or ``per_anchor`` (the XBM paper's Eq. 1: every pair's loss
    summed, over the number of anchors, so that the memory's many valid negatives weigh as in the paper;
    :mod:`xbm.losses.reducers`).
    """

    kind: str = "supcon"
    temperature: float = 0.1
    distance: str = "cosine"
    pos_margin: float = 1.0
    neg_margin: float = 0.5
    margin: float = 0.1
    alpha: float = 2.0
    beta: float = 50.0
    base: float = 0.5
    ms_mining: bool = True
    ms_epsilon: float = 0.1
    reduction: str = "nonzero_pairs"

    def __post_init__(self) -> None:
        _check(self.kind in LOSSES, "loss.kind", f"one of {list(LOSSES)}", self.kind)
        _check(self.temperature > 0.0, "loss.temperature", "> 0", self.temperature)
        _check(self.distance in LOSS_DISTANCES, "loss.distance", f"one of {list(LOSS_DISTANCES)}", self.distance)
        if self.kind == "contrastive":
            if self.distance == "lp":
                _check(self.neg_margin > self.pos_margin, "loss.neg_margin",
                       f"neg_margin > pos_margin={self.pos_margin} in distance form (loss.distance=lp: negatives "
                       "closer than neg_margin and positives farther than pos_margin are penalised)", self.neg_margin)
            else:
                _check(self.pos_margin > self.neg_margin, "loss.pos_margin",
                       f"pos_margin > neg_margin={self.neg_margin} in similarity form (loss.distance=cosine: "
                       "positives below pos_margin and negatives above neg_margin are penalised)", self.pos_margin)
        _check(self.margin >= 0.0, "loss.margin", ">= 0", self.margin)
        _check(self.alpha > 0.0, "loss.alpha", "> 0", self.alpha)
        _check(self.beta > 0.0, "loss.beta", "> 0", self.beta)
        _check(-1.0 <= self.base <= 1.0, "loss.base", "-1 <= base <= 1 (a cosine similarity)", self.base)
        _check(self.ms_epsilon >= 0.0, "loss.ms_epsilon", ">= 0", self.ms_epsilon)
        _check(self.reduction in LOSS_REDUCTIONS, "loss.reduction", f"one of {list(LOSS_REDUCTIONS)}", self.reduction)
        _check(self.reduction == "nonzero_pairs" or self.kind == "contrastive", "loss.reduction",
               f"nonzero_pairs (the default) with loss.kind={self.kind}: per_anchor is the XBM paper's contrastive "
               "loss (Eq. 1); set loss.kind=contrastive or drop loss.reduction", self.reduction)

    @property
    def mines_itself(self) -> bool:
        """Whether the loss brings its own miner (MS with ``ms_mining``), which replaces ``miner.*``."""
        return self.kind == "multi_similarity" and self.ms_mining


def resolve_miner_kind(kind: str, loss: LossConfig) -> str:
    """``miner.kind`` with ``auto`` resolved from the loss, the one place of this rule: ``none`` when the loss
    mines its own pairs (multi_similarity with ``ms_mining``), else ``pair_margin`` (the AXBN paper's SupCon
    with a pair margin miner, §5.1). An explicit kind is kept (a conflicting one is then refused)."""
    if kind != "auto":
        return kind
    return "none" if loss.mines_itself else "pair_margin"
