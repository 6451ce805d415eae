"""``loss.reduction=per_anchor``: the XBM paper's reduction of a pair loss, a PML reducer.

The XBM paper (seed 002, §3.1, Eq. 1) writes every pair-based loss in the GPW form

    L = 1/m sum_{i=1..m} [ sum_{y_j != y_i} w_ij S_ij - sum_{y_j = y_i} w_ij S_ij ]

over the m anchors of the mini-batch (the queries; against the memory, §3.3 Eq. 4, j runs over its rows): each
anchor's weighted pairs are **summed**, and the anchors averaged. For the contrastive loss (w_ij = 1 for a
negative with S_ij > lambda, 1 for every positive) that is, up to constants, ``(sum of the positive pairs' hinges +
sum of the negative pairs' hinges) / m``, as the paper's code computes it (``loss = sum(loss) / batch_size``).
PML's default for its contrastive loss (``AvgNonZeroReducer``) instead averages each kind over its pairs with a
non-zero loss, so the loss's scale does not grow with the number of valid negatives: a memory that supplies a
hundred times the batch's valid negatives (XBM Fig. 4) weighs no more than the batch. Under this reducer it
weighs a hundred times more, as in the paper.
"""
from __future__ import annotations

from pytorch_metric_learning.reducers import BaseReducer
from torch import Tensor


class PerAnchorSumReducer(BaseReducer):
    """The sum of the losses (pairs, triplets or per-row elements) over the number of anchors, the rows of
    ``embeddings`` (the queries: PML passes the loss's own embeddings, not ``ref_emb``)."""

    def _sum_per_anchor(self, losses: Tensor, loss_indices, embeddings: Tensor, labels) -> Tensor:
        return losses.sum() / max(embeddings.shape[0], 1)

    element_reduction = pos_pair_reduction = neg_pair_reduction = triplet_reduction = _sum_per_anchor
