"""Pairs as dense masks: PML's ``PairMarginMiner``, ``SupConLoss`` and ``ContrastiveLoss`` (each with its
``AvgNonZeroReducer``) and ``NTXentLoss`` (with its ``MeanReducer``) on [B, N] boolean masks instead of index
tuples, so that a training step never waits for the device.

PML hands pairs around as index tuples ``(a1, p, a2, n)``, whose lengths depend on the data: building them
(``torch.where(mask)``, boolean indexing) runs ``nonzero``, and the CPU waits for the GPU each time, about
ten times per step. Masks have the shape [B, N] known beforehand. Same numbers as PML: the same distance
matrices and comparisons give the same pairs, and SupCon's per-row losses come from the same operations
(:class:`SupConLoss` below); only the final mean over the rows with a positive loss is a masked sum / count
instead of a mean over the compacted rows, equal up to float rounding.

    masks = pair_masks(miner, queries, labels, refs, ref_labels, exclude=own_copies)   # PairMasks [B, N]
    loss = loss_from_masks(supcon_or_ntxent, queries, refs, masks)

NT-Xent gains most: PML builds a [positive pairs x negative pairs] matrix (``n_per_p``), which against a
memory of N rows is O(B^2 N^2) memory and time; on masks it is O(B N).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.reducers import AvgNonZeroReducer, MeanReducer, MultipleReducers
from pytorch_metric_learning.utils import common_functions as c_f
from torch import Tensor

from xbm.losses.reducers import PerAnchorSumReducer


class SupConLoss(losses.SupConLoss):
    """PML's ``SupConLoss`` without its host reads: PML checks ``pos_mask.any() and neg_mask.any()`` in
    Python and asserts that no pair is both positive and negative, three reads of the device per call.
    Here the check is a device flag (without both kinds of pair every row's loss is 0, which the
    AvgNonZeroReducer turns into PML's zero loss) and the assertion is dropped (pairs come from labels:
    same label -> positive, other label -> negative, never both). Otherwise the same operations, so the
    same values and gradients bit for bit."""

    def mat_based_loss(self, mat, indices_tuple):
        a1, p, a2, n = indices_tuple
        pos_mask, neg_mask = torch.zeros_like(mat), torch.zeros_like(mat)
        pos_mask[a1, p] = 1
        neg_mask[a2, n] = 1
        return self._compute_loss(mat, pos_mask, neg_mask)

    def _compute_loss(self, mat, pos_mask, neg_mask):
        both = pos_mask.bool().any() & neg_mask.bool().any()
        if not self.distance.is_inverted:
            mat = -mat
        mat = mat / self.temperature
        mat_max, _ = mat.max(dim=1, keepdim=True)
        mat = mat - mat_max.detach()  # for numerical stability
        denominator = masked_logsumexp(mat, (pos_mask + neg_mask).bool())
        log_prob = mat - denominator
        mean_log_prob_pos = (pos_mask * log_prob).sum(dim=1) / (pos_mask.sum(dim=1) + c_f.small_val(mat.dtype))
        return {"loss": {"losses": torch.where(both, -mean_log_prob_pos, 0.0),
                         "indices": c_f.torch_arange_from_size(mat), "reduction_type": "element"}}


def masked_logsumexp(x: Tensor, keep: Tensor) -> Tensor:
    """PML's ``logsumexp(x, keep_mask=keep, add_one=False, dim=1)``, the same values and gradients bit for bit, with
    the left-out entries at -inf instead of PML's ``finfo.min``. Both give exp = 0 exactly, but torch's CPU exp
    leaves its vectorised path for inputs far below its range: on a [64, 17,800] matrix (a batch against the
    Omniglot study's memory) 28.7 ms per exp at ``finfo.min`` against 6.4 ms at -inf and 1.9 ms in range, and
    SupCon runs three to five of them a step over a memory whose entries are mostly left out by the miner
    (an XBM loss step, forward and backward, 302 -> 231 ms on one thread). A row with nothing kept is 0, as PML's;
    its entries become 0 first, so that its -inf log-sum never reaches the backward pass as a NaN."""
    any_kept = keep.any(dim=1, keepdim=True)
    x = torch.where(any_kept, torch.where(keep, x, float("-inf")), 0.0)
    return torch.where(any_kept, torch.logsumexp(x, dim=1, keepdim=True), 0.0)


def supports_masks(loss, miner) -> bool:
    """Whether ``loss`` with ``miner`` can run on masks: our SupCon, PML's contrastive loss or NT-Xent, each with
    PML's default reducer (the contrastive loss also with the XBM paper's per-anchor sum) and no embedding
    regulariser, mined by a plain ``PairMarginMiner`` or not at all."""
    masked = ((isinstance(loss, SupConLoss) and type(loss.reducer) is AvgNonZeroReducer)
              or (type(loss) is losses.ContrastiveLoss and _sub_loss_reducer(loss) is not None)
              or (type(loss) is losses.NTXentLoss and type(loss.reducer) is MeanReducer))
    return (masked and getattr(loss, "embedding_regularizer", None) is None
            and (miner is None or type(miner) is miners.PairMarginMiner))


@dataclass(frozen=True)
class PairMasks:
    """``pos[i, j]`` / ``neg[i, j]``: (query i, reference j) is a positive / negative pair; [B, N] bool."""

    pos: Tensor
    neg: Tensor


def pair_masks(miner: Optional[miners.PairMarginMiner], queries: Tensor, labels: Tensor,
               refs: Optional[Tensor] = None, ref_labels: Optional[Tensor] = None,
               exclude: Optional[Tensor] = None) -> PairMasks:
    """PML's ``get_all_pairs_indices`` and ``PairMarginMiner.mine`` as masks. Without ``refs`` the batch is
    compared with itself and the diagonal is no pair (PML's convention). ``exclude`` [B, N] bool: positives
    to drop (each query's own stored copy in the memory)."""
    itself = refs is None
    if itself:
        refs, ref_labels = queries, labels
    pos = labels.unsqueeze(1) == ref_labels.unsqueeze(0)
    neg = ~pos
    if itself:
        pos.fill_diagonal_(False)
    if miner is not None:
        with torch.no_grad():   # as PML's BaseMiner.forward
            mat = miner.distance(queries, refs)
        if miner.distance.is_inverted:
            pos, neg = pos & (mat < miner.pos_margin), neg & (mat > miner.neg_margin)
        else:
            pos, neg = pos & (mat > miner.pos_margin), neg & (mat < miner.neg_margin)
    if exclude is not None:
        pos = pos & ~exclude
    return PairMasks(pos, neg)


def masks_of_pairs(pairs: tuple[Tensor, ...], n_queries: int, n_refs: int) -> PairMasks:
    """PML's index pairs ``(a1, p, a2, n)`` as [n_queries, n_refs] masks: a scatter, so no host read (the
    pairs' lengths are already known on the host)."""
    a1, p, a2, n = pairs
    pos = torch.zeros(n_queries, n_refs, dtype=torch.bool, device=a1.device)
    neg = torch.zeros_like(pos)
    pos[a1, p] = True
    neg[a2, n] = True
    return PairMasks(pos, neg)


def supcon_from_masks(loss: SupConLoss, queries: Tensor, refs: Optional[Tensor], masks: PairMasks) -> Tensor:
    """PML's ``loss(queries, labels, pairs, refs, ref_labels)`` for the pairs in ``masks`` (``refs`` None: the
    batch itself), without a host read: GenericPairLoss's "no loss when every index tuple has at most one
    element" and AvgNonZeroReducer's mean over the rows with a loss > 0 (else ``sum(queries * 0)``, PML's
    zero loss, NaN for NaN embeddings) become device flags."""
    mat = loss.distance(queries, queries if refs is None else refs)
    rows = loss._compute_loss(mat, masks.pos.to(mat.dtype), masks.neg.to(mat.dtype))["loss"]["losses"]
    some = (masks.pos.sum() > 1) | (masks.neg.sum() > 1)
    kept = (rows > 0) & some
    mean = torch.where(kept, rows, 0.0).sum() / kept.sum().clamp_min(1)
    return torch.where(kept.any(), mean, (queries * 0).sum())


def ntxent_from_masks(loss: losses.NTXentLoss, queries: Tensor, refs: Optional[Tensor], masks: PairMasks) -> Tensor:
    """PML's ``NTXentLoss`` with its ``MeanReducer`` for the pairs in ``masks``, without a host read.

    Per positive pair (a, p), with s = similarity / temperature (negated distance for a non-inverted one):
        l_ap = -log( e^{s_ap} / (e^{s_ap} + sum_{n in neg(a)} e^{s_an}) + eps ),   loss = mean over (a, p).
    PML shifts every pair by m_ap = max(s_ap, M_a), M_a = max_n s_an; here the row sum is taken once per
    anchor, R_a = sum_n e^{s_an - M_a}, and rescaled: sum_n e^{s_an - m_ap} = e^{M_a - m_ap} R_a. Equal up to
    float rounding. PML's zero loss (``sum(queries * 0)``) when no positive or no negative pair exists, or
    when neither kind has more than one pair (GenericPairLoss's check)."""
    mat = loss.distance(queries, queries if refs is None else refs)
    if not loss.distance.is_inverted:
        mat = -mat
    mat = mat / loss.temperature
    negatives = mat.masked_fill(~masks.neg, float("-inf"))
    row_max = negatives.max(dim=1, keepdim=True)[0].detach()           # M_a; -inf without a negative
    finite_max = torch.where(torch.isfinite(row_max), row_max, 0.0)
    row_sum = torch.exp(negatives - finite_max).sum(dim=1, keepdim=True)  # R_a; 0 without a negative
    shift = torch.maximum(mat, row_max).detach()                        # m_ap
    numerator = torch.exp(mat - shift)
    denominator = numerator + torch.exp(row_max - shift) * row_sum
    per_pair = -torch.log(numerator / denominator + c_f.small_val(mat.dtype))
    n_pos, n_neg = masks.pos.sum(), masks.neg.sum()
    mean = torch.where(masks.pos, per_pair, 0.0).sum() / n_pos.clamp_min(1)
    some = ((n_pos > 1) | (n_neg > 1)) & (n_pos > 0) & (n_neg > 0)
    return torch.where(some, mean, (queries * 0).sum())


def contrastive_from_masks(loss: losses.ContrastiveLoss, queries: Tensor, refs: Optional[Tensor],
                           masks: PairMasks) -> Tensor:
    """PML's ``ContrastiveLoss`` for the pairs in ``masks``, without a host read, with its ``AvgNonZeroReducer``
    or the XBM paper's :class:`~xbm.losses.reducers.PerAnchorSumReducer`.

    Per pair, with D = the loss's distance matrix and PML's ``distance.margin`` (x - y; y - x for an inverted,
    similarity-valued distance such as cosine):
        pos: [margin(D_ij, pos_margin)]_+          (lp: [d_ij - m_pos]_+,  cosine: [m_pos - s_ij]_+)
        neg: [margin(neg_margin, D_ij)]_+          (lp: [m_neg - d_ij]_+,  cosine: [s_ij - m_neg]_+)
    loss = mean of the positive pairs' losses that are > 0 + the same for the negative pairs (each 0 when
    none is); per anchor: (sum of the positive pairs' losses + sum of the negative pairs') / B, B the queries.
    PML's zero loss (``sum(queries * 0)``) when neither kind has more than one pair."""
    mat = loss.distance(queries, queries if refs is None else refs)
    margin = loss.distance.margin
    some = (masks.pos.sum() > 1) | (masks.neg.sum() > 1)   # GenericPairLoss's check
    per_anchor = _sub_loss_reducer(loss) is PerAnchorSumReducer
    zero = (queries * 0).sum()
    total = zero
    for mask, per_pair in ((masks.pos, torch.relu(margin(mat, loss.pos_margin))),
                           (masks.neg, torch.relu(margin(loss.neg_margin, mat)))):
        kept = mask & (per_pair > 0)
        summed = torch.where(kept, per_pair, 0.0).sum()
        if per_anchor:
            total = total + summed / max(queries.shape[0], 1)
        else:
            total = total + torch.where(kept.any(), summed / kept.sum().clamp_min(1), zero)
    return torch.where(some, total, zero)


def _sub_loss_reducer(loss) -> Optional[type]:
    """The one reducer class a loss with several sub-losses applies to each before summing them (PML wraps the
    reducer it is given in ``MultipleReducers``, one copy per sub-loss), when it is PML's ``AvgNonZeroReducer``
    or :class:`~xbm.losses.reducers.PerAnchorSumReducer`; None for any other."""
    reducer = loss.reducer
    if type(reducer) is not MultipleReducers or set(reducer.reducers) != set(loss.sub_loss_names()):
        return None
    kinds = {type(r) for r in reducer.reducers.values()}
    return kinds.pop() if len(kinds) == 1 and kinds <= {AvgNonZeroReducer, PerAnchorSumReducer} else None


def loss_from_masks(loss, queries: Tensor, refs: Optional[Tensor], masks: PairMasks) -> Tensor:
    """The loss of a :func:`supports_masks` loss for the pairs in ``masks``."""
    if isinstance(loss, SupConLoss):
        return supcon_from_masks(loss, queries, refs, masks)
    if isinstance(loss, losses.ContrastiveLoss):
        return contrastive_from_masks(loss, queries, refs, masks)
    return ntxent_from_masks(loss, queries, refs, masks)
