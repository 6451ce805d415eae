"""Valid negatives (XBM paper, seed 002 Fig. 4): the negative pairs that receive a non-zero gradient from the
loss, read from the loss's own per-pair terms on [B, N] pair masks (no host read). The masks are those of
:mod:`xbm.losses.pair_masks` for the losses that run on masks, and the index pairs ``(a1, p, a2, n)`` the loss
is given, scattered into masks (:func:`xbm.losses.pair_masks.masks_of_pairs`), for those on PML's index path.

What "non-zero gradient" means per loss (PML's reducers included):

- contrastive (``ContrastiveLoss`` + ``AvgNonZeroReducer``, or the per-anchor sum of ``loss.reduction=per_anchor``):
  a negative pair whose hinge ``[margin(neg_margin, D_ij)]_+`` is > 0; a pair at or past the margin has gradient 0 and is not counted.
- SupCon: every negative a of row i sits in row i's softmax denominator, with gradient
  ``p_ia / temperature`` (``p_ia`` its softmax weight, the positives' weights summing to 1), so every negative
  of a row that enters the loss counts: a row with a positive whose loss is > 0 (PML's ``AvgNonZeroReducer``
  drops the others, with no gradient), counted where ``p_ia > 0`` in floating point. Unlike the contrastive
  loss, nothing is zero for an easy negative: its gradient is only small (e^{-2/T} of the hardest's at most,
  with cosine similarity). The count says how many negatives the loss sees, not how many it learns from much.
- NT-Xent (``MeanReducer`` over positive pairs): every negative of an anchor with at least one positive
  pair (each of its positive pairs has the negative in its softmax), as SupCon.
- triplet (``TripletMarginLoss`` + ``AvgNonZeroReducer``): PML turns the pairs it is given into every triplet
  (a, p, n) with (a, p) a positive and (a, n) a negative pair of the same anchor (``convert_to_triplets``;
  ``triplets_per_anchor`` only applies when no pairs are given, which never happens here), with loss
  ``l_apn = [margin(D_ap, D_an) + m]_+`` (lp: ``[d_ap - d_an + m]_+``; cosine, an inverted distance:
  ``[s_an - s_ap + m]_+``), softplus instead of ``[.]_+`` with ``smooth_loss``. The reducer averages the
  triplets with ``l_apn > 0``; the others get no gradient. A negative pair (a, n) is valid when some triplet
  (a, p, n) has ``l_apn > 0``: a negative past the margin of every positive of a is not counted (with
  ``smooth_loss`` every triplet counts unless its softplus underflows to 0). The extreme positive of the
  anchor (largest d_ap, smallest s_ap) decides it, because rounding and ``[.]_+`` are monotone: one [B, N]
  comparison, no [B, P, N] tensor. With ``swap`` the hinge depends on D_pn too (and PML reads D_pn from the
  query rows, which against a memory are not the positive's): not defined, ``None``.
- multi-similarity (``MultiSimilarityLoss`` + its ``MeanReducer``, MS paper Eq. 8): row a's negative term is
  ``1/beta log(1 + sum_n exp(beta margin(base, D_an)))`` over the negative pairs it is given (after the MS miner,
  MS Eq. 3-4, with ``loss.ms_mining``, or the pair margin miner, or all pairs); its gradient on pair (a, n) is
  the softmax weight ``w_an = exp(beta (s_an - base) - lse_a)`` (``lse_a`` the log of 1 + the row's sum), and the
  mean over the B rows keeps every row: ``dL/ds_an = (1/B)(1/beta) w_an beta``. So every negative pair given to
  the loss counts where that product is non-zero in floating point, computed in the order of torch's backward
  (a far negative's weight can be subnormal, e^-101 with beta = 100, and its product with 1/(beta B) 0), and
  a pair the miner dropped does not. As for SupCon the count is how many negatives the loss sees: an easy
  one's gradient is tiny, not 0. GenericPairLoss's "no loss when each index tuple has at most one pair" holds
  for it too.

Other losses (or these with another reducer, or an embedding regulariser) have no count here: ``None``.
"""
from __future__ import annotations

from typing import Optional

import torch
from pytorch_metric_learning import losses
from pytorch_metric_learning.reducers import AvgNonZeroReducer, MeanReducer
from pytorch_metric_learning.utils import common_functions as c_f
from torch import Tensor

from xbm.losses.pair_masks import PairMasks, SupConLoss, masks_of_pairs, supports_masks


def counts_on_pairs(loss) -> bool:
    """Whether ``loss`` on PML's index path has a valid-negative count here: PML's triplet loss (no ``swap``)
    with its ``AvgNonZeroReducer``, or its multi-similarity loss with its ``MeanReducer``; no regulariser."""
    triplet = (type(loss) is losses.TripletMarginLoss and not loss.swap
               and type(loss.reducer) is AvgNonZeroReducer)
    ms = type(loss) is losses.MultiSimilarityLoss and type(loss.reducer) is MeanReducer
    return (triplet or ms) and getattr(loss, "embedding_regularizer", None) is None


@torch.no_grad()
def valid_negatives(loss, miner, queries: Tensor, refs: Optional[Tensor], masks: PairMasks) -> Optional[Tensor]:
    """[B, N] bool: ``masks.neg`` pairs with a non-zero gradient in ``loss`` (module docstring); ``refs`` None:
    the batch against itself. ``masks``: the pairs the loss gets (``miner``'s, for a loss on masks). None for a
    loss without a definition."""
    if supports_masks(loss, miner):
        return _on_masks(loss, queries, refs, masks)
    if not counts_on_pairs(loss):
        return None
    mat = loss.distance(queries, queries if refs is None else refs)
    if isinstance(loss, losses.TripletMarginLoss):
        return _triplet(loss, mat, masks)
    return _multi_similarity(loss, mat, masks)


def valid_negatives_of_pairs(loss, queries: Tensor, refs: Optional[Tensor], pairs) -> Optional[Tensor]:
    """:func:`valid_negatives` for a loss on PML's index path, given the pairs ``(a1, p, a2, n)`` it gets (after
    mining, self pairs removed). No masks are built for a loss without a definition: None."""
    if not counts_on_pairs(loss):
        return None
    n_refs = len(queries) if refs is None else len(refs)
    return valid_negatives(loss, None, queries, refs, masks_of_pairs(pairs, len(queries), n_refs))


def _on_masks(loss, queries: Tensor, refs: Optional[Tensor], masks: PairMasks) -> Tensor:
    """The contrastive loss, SupCon and NT-Xent (the losses of :func:`xbm.losses.pair_masks.supports_masks`)."""
    mat = loss.distance(queries, queries if refs is None else refs)
    some = _some_pairs(masks)
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


def _some_pairs(masks: PairMasks) -> Tensor:
    """GenericPairLoss's check, a device flag: with at most one pair of each kind the loss is a constant 0."""
    return (masks.pos.sum() > 1) | (masks.neg.sum() > 1)


def _triplet(loss: losses.TripletMarginLoss, mat: Tensor, masks: PairMasks) -> Tensor:
    """Negatives in a triplet with a loss > 0. Each anchor's extreme positive stands for all of its positives:
    ``margin(D_ap, D_an)`` grows with d_ap (falls with s_ap), and float rounding, ``+ m``, relu and softplus
    keep that order, so the extreme triplet's loss is > 0 exactly when some triplet's PML computes is."""
    inverted = loss.distance.is_inverted
    # the hardest positive: smallest similarity / largest distance; +-inf (never chosen) for other columns
    fill = torch.inf if inverted else -torch.inf
    ranked = torch.where(masks.pos, mat, fill)
    hardest = ranked.min(dim=1, keepdim=True).values if inverted else ranked.max(dim=1, keepdim=True).values
    violation = loss.distance.margin(hardest, mat) + loss.margin
    per_pair = torch.nn.functional.softplus(violation) if loss.smooth_loss else torch.relu(violation)
    return masks.neg & masks.pos.any(dim=1, keepdim=True) & (per_pair > 0)


def _multi_similarity(loss: losses.MultiSimilarityLoss, mat: Tensor, masks: PairMasks) -> Tensor:
    """Negatives with a non-zero gradient from their row's negative log-sum-exp: PML's ``lmu.logsumexp``
    (masked to the row's negatives, a 0 column for the "1 +"), then the gradient as torch's backward forms it:
    the MeanReducer's 1/B times the term's 1/beta, times the logsumexp's ``exp(x - lse)``, times beta."""
    scaled = (loss.beta * loss.distance.margin(loss.base, mat)).masked_fill(~masks.neg, c_f.neg_inf(mat.dtype))
    one = torch.zeros(len(mat), 1, dtype=scaled.dtype, device=scaled.device)
    lse = torch.logsumexp(torch.cat([scaled, one], dim=1), dim=1, keepdim=True)
    upstream = torch.ones((), dtype=lse.dtype, device=lse.device) / len(mat) * (1.0 / loss.beta)
    grad = upstream * torch.exp(scaled - lse) * loss.beta
    return masks.neg & (grad != 0) & _some_pairs(masks)
