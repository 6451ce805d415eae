"""Pairs as masks (xbm/losses/pair_masks.py) against PML's index tuples: the same pairs, the same SupCon, contrastive
and NT-Xent losses."""
from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning import distances, losses, miners, reducers
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from xbm.losses.pair_masks import (PairMasks, SupConLoss, loss_from_masks, masked_logsumexp, masks_of_pairs, pair_masks,
                                   supports_masks)
from xbm.losses.reducers import PerAnchorSumReducer
from xbm.registries import MINER_DISTANCES as DISTANCES

# (ours on masks, PML's on index tuples): the same loss
LOSSES = {"supcon": lambda: (SupConLoss(0.1), losses.SupConLoss(0.1)),
          "ntxent": lambda: (losses.NTXentLoss(0.1), losses.NTXentLoss(0.1)),
          "ntxent_lp": lambda: (losses.NTXentLoss(0.2, distance=distances.LpDistance()),
                                losses.NTXentLoss(0.2, distance=distances.LpDistance())),
          # the neighbours objective's (cosine, pos_margin 1) and the XBM paper's margins; PML's default (lp)
          "contrastive_cosine": lambda: 2 * (losses.ContrastiveLoss(1.0, 0.5, distance=distances.CosineSimilarity()),),
          "contrastive_lp": lambda: (losses.ContrastiveLoss(0.3, 1.2), losses.ContrastiveLoss(0.3, 1.2)),
          # the XBM paper's reduction (loss.reduction=per_anchor): PML's index path through the same reducer
          "contrastive_per_anchor": lambda: 2 * (losses.ContrastiveLoss(1.0, 0.5, distance=distances.CosineSimilarity(),
                                                                        reducer=PerAnchorSumReducer()),)}
# PML's zero loss for these pair sets (None: a loss PML does compute, e.g. the contrastive loss of positives alone)
ZERO_CASES = {"no pair": ((), ()), "one of each": (((0, 1),), ((0, 2),)),
              "positives only": (((0, 1), (1, 0)), ()), "negatives only": ((), ((0, 2), (2, 0)))}
MARGINS = {"lp": (0.6, 1.2), "lp_raw": (3.0, 3.8), "cosine": (0.7, 0.1)}   # each selects some pairs


def _miner(distance):
    if distance is None:
        return None
    return miners.PairMarginMiner(*MARGINS[distance], distance=DISTANCES[distance]())


def _as_mask(a, b, shape):
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[a, b] = True
    return mask


def _data(seed, n_refs=12):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(8, 6, generator=gen), torch.randint(0, 3, (8,), generator=gen),
            torch.randn(n_refs, 6, generator=gen), torch.randint(0, 3, (n_refs,), generator=gen))


@pytest.mark.parametrize("distance", [None, "lp", "lp_raw", "cosine"])
@pytest.mark.parametrize("with_refs", [False, True])
def test_masks_hold_exactly_the_pairs_pml_mines(distance, with_refs):
    """Bugs caught: a margin direction flipped (cosine is inverted), the diagonal kept as a positive pair of
    the batch with itself (or dropped against references), a negative test on labels inverted, ``exclude``
    ignored or applied to negatives."""
    for seed in range(4):
        emb, labels, refs, ref_labels = _data(seed)
        miner = _miner(distance)
        args = (emb, labels, refs, ref_labels) if with_refs else (emb, labels)
        if miner is not None:
            a1, p, a2, n = miner(*args)
        else:
            a1, p, a2, n = lmu.get_all_pairs_indices(labels, ref_labels if with_refs else None)
        shape = (8, 12 if with_refs else 8)
        masks = pair_masks(miner, *args)
        assert torch.equal(masks.pos, _as_mask(a1, p, shape)) and torch.equal(masks.neg, _as_mask(a2, n, shape))
        exclude = torch.zeros(shape, dtype=torch.bool)
        exclude[:, 0] = True
        dropped = pair_masks(miner, *args, exclude=exclude)
        assert not dropped.pos[:, 0].any() and torch.equal(dropped.pos[:, 1:], masks.pos[:, 1:])
        assert torch.equal(dropped.neg, masks.neg)


def test_masks_of_pairs_scatter_pmls_index_pairs_into_their_shape():
    """Bugs caught: positive and negative index pairs swapped or read as (a1, a2) / (p, n), the shape taken from
    the indices instead of the query and reference counts (a reference no pair uses cut off), and empty tuples
    (PML's MultiSimilarityMiner without a pair) failing."""
    emb, labels, refs, ref_labels = _data(0)
    pairs = lmu.get_all_pairs_indices(labels, ref_labels)
    masks = masks_of_pairs(pairs, 8, 12)
    assert torch.equal(masks.pos, labels[:, None] == ref_labels[None, :])
    assert torch.equal(masks.neg, labels[:, None] != ref_labels[None, :])
    empty = torch.tensor([], dtype=torch.long)
    nothing = masks_of_pairs((empty,) * 4, 8, 13)
    assert nothing.pos.shape == nothing.neg.shape == (8, 13) and not (nothing.pos.any() or nothing.neg.any())


@pytest.mark.parametrize("kind", sorted(LOSSES))
@pytest.mark.parametrize("distance", [None, "lp", "cosine"])
@pytest.mark.parametrize("with_refs", [False, True])
def test_the_loss_on_masks_equals_pmls_on_the_same_pairs(kind, distance, with_refs):
    """Bugs caught: SupCon's masked mean over the rows with a positive loss dividing by every row (or by the
    pairs), rows with a zero loss counted; NT-Xent's row sum of negatives taken over another anchor's row,
    over positives too, or rescaled by the wrong shift (m_ap vs M_a), its mean taken over rows instead of
    positive pairs, a distance not negated; the loss's own distance replaced by the miner's. Value and
    gradient must match PML's loss with its default reducer on the same pairs. Contrastive: the positive and
    negative means swapped or taken over every pair instead of those with a loss > 0, the margin's sign
    wrong for a similarity (cosine) or a distance (lp)."""
    for seed in range(4):
        emb, labels, refs, ref_labels = _data(seed)
        miner = _miner(distance)
        args = (labels, refs, ref_labels) if with_refs else (labels,)
        pairs = miner(emb, *args) if miner is not None else lmu.get_all_pairs_indices(
            labels, ref_labels if with_refs else None)
        ours, pml = LOSSES[kind]()
        a, b = emb.clone().requires_grad_(), emb.clone().requires_grad_()
        want = pml(a, labels, pairs, *(args[1:] if with_refs else ()))
        masks = pair_masks(miner, emb, labels, *((refs, ref_labels) if with_refs else ()))
        got = loss_from_masks(ours, b, refs if with_refs else None, masks)
        want.backward()
        got.backward()
        assert float(want.detach()) > 0
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("kind", sorted(LOSSES))
@pytest.mark.parametrize("case", sorted(ZERO_CASES))
def test_the_zero_loss_cases_of_pml_give_zero(kind, case):
    """Bugs caught: PML's "every index tuple has at most one element: zero loss" rule (one positive and one
    negative pair) or SupCon's and NT-Xent's "no positive or no negative pair: zero" check lost, so a
    degenerate batch trains on a loss PML would not have; the zero not carrying a gradient path (PML's
    ``sum(embeddings * 0)``); the contrastive loss zeroed where PML computes one (positives or negatives alone)."""
    # 0-1 and 0-2 close enough that every contrastive variant here penalises both pairs (cosine 0.6 and 0.8)
    emb = torch.tensor([[1.0, 0.0, 0.0, 0.0], [0.6, 0.8, 0.0, 0.0], [0.8, 0.0, 0.6, 0.0]], requires_grad=True)
    labels = torch.tensor([0, 0, 1])
    pos_mask, neg_mask = torch.zeros(3, 3, dtype=torch.bool), torch.zeros(3, 3, dtype=torch.bool)
    pos, neg = ZERO_CASES[case]
    for i, j in pos:
        pos_mask[i, j] = True
    for i, j in neg:
        neg_mask[i, j] = True
    to_pairs = lambda m: tuple(torch.nonzero(m, as_tuple=True))   # noqa: E731
    ours, pml = LOSSES[kind]()
    mine = emb.detach().clone().requires_grad_()
    want = pml(emb, labels, (*to_pairs(pos_mask), *to_pairs(neg_mask)))
    got = loss_from_masks(ours, mine, None, PairMasks(pos_mask, neg_mask))
    computed = kind.startswith("contrastive") and case in ("positives only", "negatives only")
    assert (float(want.detach()) > 0) == computed
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0.0)
    want.backward()
    got.backward()
    torch.testing.assert_close(mine.grad, emb.grad, rtol=1e-5, atol=1e-7)
    if not computed:
        assert torch.equal(mine.grad, torch.zeros_like(emb))


@pytest.mark.parametrize("kind", sorted(LOSSES))
def test_nan_embeddings_give_a_nan_loss(kind):
    """Bug caught: a masked mean that turns NaN rows into a zero loss, hiding a diverged model from the
    finiteness check (PML's zero loss is ``sum(embeddings * 0)``: NaN for NaN embeddings)."""
    emb = torch.full((4, 3), float("nan"))
    labels = torch.tensor([0, 0, 1, 1])
    loss = loss_from_masks(LOSSES[kind]()[0], emb, None, pair_masks(None, emb, labels))
    assert torch.isnan(loss)


def test_an_anchor_without_negatives_adds_pmls_log_one_term():
    """Bug caught: NT-Xent's empty row sum (an anchor whose every reference is a positive) giving NaN
    (exp(-inf - -inf)) or dropping that anchor's positive pairs from the mean; PML gives each of them
    -log(1 + eps) and counts it."""
    emb = torch.randn(4, 5, requires_grad=True)
    labels = torch.tensor([0, 0, 1, 2])
    pos = torch.zeros(4, 4, dtype=torch.bool)
    pos[0, 1] = pos[1, 0] = True
    neg = torch.zeros(4, 4, dtype=torch.bool)
    neg[2, 3] = neg[3, 2] = neg[1, 2] = True       # anchor 0 has no negative
    to_pairs = lambda m: tuple(torch.nonzero(m, as_tuple=True))   # noqa: E731
    want = losses.NTXentLoss(0.1)(emb, labels, (*to_pairs(pos), *to_pairs(neg)))
    got = loss_from_masks(losses.NTXentLoss(0.1), emb, None, PairMasks(pos, neg))
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
    assert torch.isfinite(torch.autograd.grad(got, emb)[0]).all()


def test_only_supcon_contrastive_and_ntxent_with_their_default_reducers_and_a_plain_miner_run_on_masks():
    """Bug caught: masks used for a loss or miner whose semantics they do not reproduce (PML's own SupCon
    still reads the host; another reducer; a miner subclass with other rules)."""
    pair_margin = miners.PairMarginMiner()
    assert supports_masks(SupConLoss(0.1), None) and supports_masks(SupConLoss(0.1), pair_margin)
    assert not supports_masks(losses.SupConLoss(0.1), pair_margin)
    assert not supports_masks(SupConLoss(0.1, reducer=reducers.MeanReducer()), pair_margin)
    assert not supports_masks(SupConLoss(0.1), miners.MultiSimilarityMiner())
    assert supports_masks(losses.NTXentLoss(0.1), None) and supports_masks(losses.NTXentLoss(0.1), pair_margin)
    assert not supports_masks(losses.NTXentLoss(0.1, reducer=reducers.AvgNonZeroReducer()), None)
    assert supports_masks(losses.ContrastiveLoss(), None) and supports_masks(losses.ContrastiveLoss(), pair_margin)
    assert supports_masks(losses.ContrastiveLoss(reducer=reducers.AvgNonZeroReducer()), None)
    assert not supports_masks(losses.ContrastiveLoss(reducer=reducers.MeanReducer()), None)
    assert supports_masks(losses.ContrastiveLoss(reducer=PerAnchorSumReducer()), pair_margin)
    assert not supports_masks(losses.TripletMarginLoss(), None)


def test_masked_logsumexp_equals_pmls_bit_for_bit_and_a_row_with_nothing_kept_is_zero_without_nan():
    """Bugs caught: the -inf masking (taken for torch's CPU exp, which leaves its vectorised path at PML's
    ``finfo.min``) changing a value or a gradient; a row with nothing kept whose -inf log-sum reaches the backward
    pass as NaN (0 * exp(-inf - -inf)), which would poison every embedding's gradient."""
    torch.manual_seed(0)
    x = torch.randn(5, 40) * 10
    keep = torch.rand(5, 40) > 0.7
    keep[3] = False   # a row with nothing kept: PML gives 0
    keep[4] = True    # a row with everything kept
    ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    got, want = masked_logsumexp(ours, keep), lmu.logsumexp(theirs, keep_mask=keep, add_one=False, dim=1)
    assert torch.equal(got, want) and float(got[3]) == 0.0
    weights = torch.randn(5, 1)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    assert torch.equal(ours.grad, theirs.grad) and not ours.grad.isnan().any()
    assert torch.equal(ours.grad[3], torch.zeros(40)) and torch.equal(ours.grad[~keep], torch.zeros(int((~keep).sum())))


def test_per_anchor_contrastive_is_the_xbm_papers_eq1_by_hand():
    """Bugs caught: ``loss.reduction=per_anchor`` dividing by the pairs (PML's mean: a memory's hundred times more
    valid negatives would weigh no more than the batch's), by the references instead of the anchors, or
    counting pairs past the margin. Two anchors against three references, cosine similarities chosen by hand:
    (sum of [1 - s]_+ over positives + sum of [s - 0.5]_+ over negatives) / 2, on masks and on PML's index path;
    doubling the references doubles the per-anchor loss and leaves PML's mean unchanged."""
    queries = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    refs = torch.tensor([[0.8, 0.6], [0.6, 0.8], [-1.0, 0.0]])   # s = 0.8, 0.6, -1 with row 0; 0.6, 0.8, 0 with row 1
    labels, ref_labels = torch.tensor([0, 1]), torch.tensor([0, 2, 1])
    # row 0: positive ref 0 (1 - 0.8 = 0.2), negatives ref 1 (0.6 - 0.5 = 0.1) and ref 2 (-1: none)
    # row 1: negatives ref 0 (0.6 - 0.5 = 0.1) and ref 1 (0.8 - 0.5 = 0.3), positive ref 2 (1 - 0 = 1.0)
    by_hand = (0.2 + 1.0 + 0.1 + 0.1 + 0.3) / 2
    paper = losses.ContrastiveLoss(1.0, 0.5, distance=distances.CosineSimilarity(), reducer=PerAnchorSumReducer())
    pml_mean = losses.ContrastiveLoss(1.0, 0.5, distance=distances.CosineSimilarity())
    masks = pair_masks(None, queries, labels, refs, ref_labels)
    assert float(loss_from_masks(paper, queries, refs, masks)) == pytest.approx(by_hand)
    assert float(paper(queries, labels, ref_emb=refs, ref_labels=ref_labels)) == pytest.approx(by_hand)
    assert float(loss_from_masks(pml_mean, queries, refs, masks)) == pytest.approx((0.2 + 1.0) / 2 + 0.5 / 3)
    twice = pair_masks(None, queries, labels, torch.cat([refs, refs]), torch.cat([ref_labels, ref_labels]))
    assert float(loss_from_masks(paper, queries, torch.cat([refs, refs]), twice)) == pytest.approx(2 * by_hand)
    assert float(loss_from_masks(pml_mean, queries, torch.cat([refs, refs]), twice)) == pytest.approx(
        (0.2 + 1.0) / 2 + 0.5 / 3)
