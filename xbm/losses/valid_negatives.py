"""Valid negatives (XBM paper, seed 002 Fig. 4): the negative pairs that receive a non-zero gradient from the
loss, read from the loss's own per-pair terms on the [B, N] masks of :mod:`xbm.losses.pair_masks` (no host read).

What "non-zero gradient" means per loss (PML's reducers included):

- contrastive (``ContrastiveLoss`` + ``AvgNonZeroReducer``): a negative pair whose hinge
  ``[margin(neg_margin, D_ij)]_+`` is > 0; a pair at or past the margin has gradient 0 and is not counted.
- SupCon: every negative a of row i sits in row i's softmax denominator, with gradient
  ``p_ia / temperature`` (``p_ia`` its softmax weight, the positives' weights summing to 1), so every negative
  of a row that enters the loss counts: a row with a positive whose loss is > 0 (PML's ``AvgNonZeroReducer``
  drops the others, with no gradient), counted where ``p_ia > 0`` in floating point. Unlike the contrastive
  loss, nothing is zero for an easy negative: its gradient is only small (e^{-2/T} of the hardest's at most,
  with cosine similarity). The count says how many negatives the loss sees, not how many it learns from much.
- NT-Xent (``MeanReducer`` over positive pairs): every negative of an anchor with at least one positive
  pair (each of its positive pairs has the negative in its softmax), as SupCon.

Other losses (triplet, multi-similarity: PML's index path) have no count here: ``None``.
"""
from __future__ import annotations

from typing import Optional

import torch
from pytorch_metric_learning import losses
from torch import Tensor

from xbm.losses.pair_masks import PairMasks, SupConLoss, supports_masks


@torch.no_grad()
def valid_negatives(loss, miner, queries: Tensor, refs: Optional[Tensor], masks: PairMasks) -> Optional[Tensor]:
    """[B, N] bool: ``masks.neg`` pairs with a non-zero gradient in ``loss`` (module docstring); ``refs`` None:
    the batch against itself. None for a loss that does not run on masks."""
    if not supports_masks(loss, miner):
        return None
    mat = loss.distance(queries, queries if refs is None else refs)
    some = (masks.pos.sum() > 1) | (masks.neg.sum() > 1)   # GenericPairLoss: otherwise the loss is a constant 0
    if isinstance(loss, losses.ContrastiveLoss):
        return masks.neg & (torch.relu(loss.distance.margin(loss.neg_margin, mat)) > 0) & some
    if isinstance(loss, SupConLoss):
        pos, neg = masks.pos.to(mat.dtype), masks.neg.to(mat.dtype)
        rows = loss._compute_loss(mat, pos, neg)["loss"]["losses"]
        scaled = (mat if loss.distance.is_inverted else -mat) / loss.temperature
        scaled = scaled - scaled.max(dim=1, keepdim=True).values
        keep = (pos + neg).bool()
        log_z = torch.logsumexp(torch.where(keep, scaled, -torch.inf), dim=1, keepdim=True)
        weight = torch.exp(scaled - log_z)
        return masks.neg & ((rows > 0) & some)[:, None] & (weight > 0)
    # NT-Xent: its zero loss (ntxent_from_masks) also when no positive or no negative pair exists
    some = some & masks.pos.any() & masks.neg.any()
    return masks.neg & masks.pos.any(dim=1, keepdim=True) & some
