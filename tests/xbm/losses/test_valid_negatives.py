"""Valid negatives (XBM Fig. 4) against PML's own losses: per-pair terms and gradients."""
import math

import pytest
import torch
from pytorch_metric_learning import distances, losses, miners
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from xbm.losses.criteria import BatchLoss
from xbm.losses.pair_masks import PairMasks, SupConLoss, masks_of_pairs, pair_masks
from xbm.losses.valid_negatives import valid_negatives, valid_negatives_of_pairs
from xbm.losses.xbm_loss import XBMLoss


def _data(seed=0, b=6, n=10, d=4, classes=3):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, d, generator=g), torch.randint(0, classes, (b,), generator=g),
            torch.randn(n, d, generator=g), torch.randint(0, classes, (n,), generator=g))


def _as_mask(a, n, shape):
    mask = torch.zeros(shape, dtype=torch.bool)
    mask[a, n] = True
    return mask


@pytest.mark.parametrize("distance", ["cosine", "lp"])
@pytest.mark.parametrize("miner", [None, miners.PairMarginMiner(0.2, 0.8)])
def test_contrastive_valid_negatives_are_pmls_non_zero_per_pair_losses(distance, miner):
    """Bug caught: every mined negative counted (a pair past the margin has a zero loss and no gradient), or
    the margin's direction wrong for a similarity (cosine: s_ij > neg_margin is a violation)."""
    dist = {"cosine": distances.CosineSimilarity, "lp": distances.LpDistance}[distance]()
    loss = losses.ContrastiveLoss(pos_margin=0.9 if distance == "cosine" else 0.1,
                                  neg_margin=0.1 if distance == "cosine" else 1.2, distance=dist)
    q, ql, r, rl = _data()
    tuples = miner(q, ql, r, rl) if miner is not None else lmu.get_all_pairs_indices(ql, rl)
    terms = loss.compute_loss(q, ql, tuples, r, rl)["neg_loss"]
    a, n = terms["indices"]
    want = _as_mask(a[terms["losses"] > 0], n[terms["losses"] > 0], (len(q), len(r)))
    got = valid_negatives(loss, miner, q, r, pair_masks(miner, q, ql, r, rl))
    assert torch.equal(got, want) and int(want.sum()) > 0
    if miner is None:   # some negatives past the margin: not every negative counts
        assert int(want.sum()) < int(pair_masks(miner, q, ql, r, rl).neg.sum())


def _recorded(base=distances.CosineSimilarity, **kwargs):
    """PML's distance ``base``, keeping its matrix so that a test reads the loss's gradient per pair."""

    class Recorded(base):
        def compute_mat(self, query_emb, ref_emb):
            mat = super().compute_mat(query_emb, ref_emb)
            if mat.requires_grad:   # the loss's own call, not the count's (under no_grad)
                self.mat = mat
                mat.retain_grad()
            return mat

    return Recorded(**kwargs)


@pytest.mark.parametrize("miner", [None, miners.PairMarginMiner(0.2, 0.8)])
def test_supcon_valid_negatives_are_the_pairs_pmls_gradient_reaches(miner):
    """Bug caught: SupCon's negatives counted where PML's gradient is zero (rows without a positive, rows the
    AvgNonZeroReducer drops, unmined negatives outside the softmax) or not counted where it is not."""
    q, ql, r, rl = _data(seed=1, b=8, n=12)
    ql[0] = 7   # a query without any positive: its negatives get no gradient
    pml = losses.SupConLoss(temperature=0.5, distance=_recorded())
    q = q.requires_grad_()
    tuples = miner(q, ql, r, rl) if miner is not None else lmu.get_all_pairs_indices(ql, rl)
    pml(q, ql, tuples, r, rl).backward()
    masks = pair_masks(miner, q.detach(), ql, r, rl)
    want = masks.neg & (pml.distance.mat.grad != 0)
    got = valid_negatives(SupConLoss(temperature=0.5), miner, q.detach(), r, masks)
    assert torch.equal(got, want) and int(got.sum()) > 0 and not got[0].any()


def test_xbm_loss_and_batch_loss_report_valid_negatives_of_memory_and_batch():
    """Bug caught: the counts missing from ``last_stats`` (the epoch would report 0), the batch's share not
    the memory loss's negatives against this batch's rows, or a loss off the mask path reporting a number."""
    torch.manual_seed(0)
    crit = XBMLoss(losses.ContrastiveLoss(neg_margin=0.1, distance=distances.CosineSimilarity()), 4, 20)
    for _ in range(3):
        emb, labels = torch.randn(6, 4), torch.randint(0, 3, (6,))
        crit(emb, labels)
    stats = crit.last_stats
    refs, ref_labels, _, _ = crit.memory.valid()
    valid = valid_negatives(crit.loss, None, emb, refs, pair_masks(None, emb, labels, refs, ref_labels))
    assert float(stats["valid_neg_memory"]) == int(valid.sum()) > float(stats["valid_neg_batch"]) > 0
    assert float(stats["valid_neg_batch"]) == int(valid[:, 12:18].sum())   # this batch: slots 12 .. 17
    batch = BatchLoss(SupConLoss(0.1))
    batch(emb, labels)
    assert batch.last_stats["valid_neg_memory"] == 0.0 and float(batch.last_stats["valid_neg_batch"]) > 0
    swapped = XBMLoss(losses.TripletMarginLoss(swap=True), 4, 20)   # no definition (module docstring): NaN
    swapped(emb, labels)
    assert math.isnan(swapped.last_stats["valid_neg_memory"]) and math.isnan(swapped.last_stats["valid_neg_batch"])


def test_valid_negatives_of_a_wrapped_batch_and_of_the_mined_in_batch_loss():
    """Bugs caught (mutants that lived): the batch's share losing the rows written to slot 0 (a memory that
    wrapped puts the batch at slots 0 .. 5), the in-batch loss (``batch_loss_weight > 0``) reporting no count
    or counting without its miner, and the memory's count ignoring the miner."""
    torch.manual_seed(1)
    miner = miners.PairMarginMiner(pos_margin=0.5, neg_margin=0.0, distance=distances.CosineSimilarity())
    loss = losses.ContrastiveLoss(neg_margin=-0.5, distance=distances.CosineSimilarity())
    crit = XBMLoss(loss, 4, 18, miner=miner, batch_loss_weight=0.5)
    for _ in range(4):   # 3 batches fill slots 0 .. 17; the 4th wraps to 0 .. 5
        emb, labels = torch.randn(6, 4), torch.randint(0, 3, (6,))
        crit(emb, labels)
    stats = crit.last_stats
    refs, ref_labels, _, _ = crit.memory.valid()
    exclude = torch.zeros(6, 18, dtype=torch.bool)
    exclude[torch.arange(6), torch.arange(6)] = True   # each query's own stored copy
    memory = valid_negatives(loss, miner, emb, refs, pair_masks(miner, emb, labels, refs, ref_labels, exclude))
    unmined = valid_negatives(loss, None, emb, refs, pair_masks(None, emb, labels, refs, ref_labels, exclude))
    assert float(stats["valid_neg_memory"]) == int(memory.sum()) != int(unmined.sum())
    in_batch = valid_negatives(loss, miner, emb, None, pair_masks(miner, emb, labels))
    assert float(stats["valid_neg_batch"]) == int(in_batch.sum()) > 0
    no_weight = XBMLoss(loss, 4, 18, miner=miner)
    for _ in range(4):
        no_weight(torch.randn(6, 4), torch.randint(0, 3, (6,)))
    refs, ref_labels, _, _ = no_weight.memory.valid()
    emb, labels = refs[:6], ref_labels[:6]   # the last batch, as stored (fp32, no normaliser)
    valid = valid_negatives(loss, miner, emb, refs, pair_masks(miner, emb, labels, refs, ref_labels, exclude))
    assert float(no_weight.last_stats["valid_neg_batch"]) == int(valid[:, :6].sum()) > 0


def _circle(*degrees):
    """2-D unit vectors at ``degrees``: cosine similarities a reader can check with a calculator."""
    rad = torch.tensor(degrees) * math.pi / 180
    return torch.stack([torch.cos(rad), torch.sin(rad)], dim=1)


# Six points on the unit circle; cosine similarities s_ij (rounded) and classes A = {0, 1, 2}, B = {3, 4}, C = {5}:
#            0: 0deg   1: 30deg  2: 100deg  3: 60deg  4: 180deg  5: 270deg
#   0 (A)     1        .866      -.174      .5        -1          0
#   1 (A)               1         .342      .866      -.866      -.5
#   2 (A)                         1         .766       .174      -.985
#   3 (B)                                   1         -.5        -.866
#   4 (B)                                              1          0
# 22 negative pairs: anchors 0-2 have negatives 3, 4, 5; anchors 3, 4 have 0, 1, 2, 5; anchor 5 has all five.
HAND = _circle(0.0, 30.0, 100.0, 60.0, 180.0, 270.0)
HAND_LABELS = torch.tensor([0, 0, 0, 1, 1, 2])
# The valid negatives of both hand tests below (worked out in each): ten pairs.
HAND_VALID = _as_mask([0, 0, 1, 2, 2, 3, 3, 3, 4, 4], [3, 5, 3, 3, 4, 0, 1, 2, 2, 5], (6, 6))


def test_triplet_valid_negatives_counted_by_hand():
    """Bugs caught: an easy negative past the margin of every positive counted (triplet loss 0, no gradient);
    a negative counted only if it violates the margin against every positive, or against the easiest one
    (pair (0, 3) is valid through one positive only); the cosine similarity's inverted margin read as a
    distance's; an anchor without a positive (5) given valid negatives; BatchLoss not reporting the count.

    Cosine similarity, margin m = 0.2, all pairs: triplet (a, p, n) has loss [s_an - s_ap + 0.2]_+, and pair
    (a, n) is valid when that is > 0 for some positive p, i.e. s_an > min_p s_ap - 0.2:
      anchor 0: positives s = .866, -.174 -> bar -.374: n=3 (.5) yes (only with p=2: .5 - .866 + .2 < 0),
                n=4 (-1) no (-1 + .174 + .2 = -.626), n=5 (0) yes (.374)
      anchor 1: positives .866, .342 -> bar .142: n=3 (.866) yes, n=4 (-.866) no, n=5 (-.5) no (-.642)
      anchor 2: positives -.174, .342 -> bar -.374: n=3 (.766) yes, n=4 (.174) yes (.547), n=5 (-.985) no
      anchor 3: positive -.5 -> bar -.7: n=0 (.5), 1 (.866), 2 (.766) yes; n=5 (-.866) no (-.166)
      anchor 4: positive -.5 -> bar -.7: n=0 (-1) no (-.3), n=1 (-.866) no (-.166), n=2 (.174) yes, n=5 (0) yes
      anchor 5: no positive, no triplet: none.
    10 of the 22 negatives."""
    loss = losses.TripletMarginLoss(margin=0.2, distance=distances.CosineSimilarity())
    got = valid_negatives_of_pairs(loss, HAND, None, lmu.get_all_pairs_indices(HAND_LABELS))
    assert torch.equal(got, HAND_VALID)
    batch = BatchLoss(loss)
    batch(HAND, HAND_LABELS)
    assert float(batch.last_stats["valid_neg_batch"]) == 10


def test_multi_similarity_valid_negatives_counted_by_hand():
    """Bugs caught: a negative the MS miner dropped counted (it is not in the loss: no gradient), the mined
    pairs ignored, or MS treated like the triplet loss without its miner (MS's negative term needs no positive:
    anchor 5's negatives all carry gradient when every pair enters).

    MS miner, epsilon 0.1, cosine similarity (MS paper Eq. 4): negative (a, n) is kept when
    s_an + 0.1 > min_p s_ap (an anchor without a positive keeps none: its min is +inf):
      anchor 0: min -.174: n=3 (.6 > -.174) yes, n=4 (-.9) no, n=5 (.1) yes
      anchor 1: min .342: n=3 (.966) yes, n=4 (-.766) no, n=5 (-.4) no
      anchor 2: min -.174: n=3 (.866) yes, n=4 (.274) yes, n=5 (-.885) no
      anchor 3: min -.5: n=0 (.6), 1 (.966), 2 (.866) yes; n=5 (-.766) no
      anchor 4: min -.5: n=0 (-.9) no, n=1 (-.766) no, n=2 (.274) yes, n=5 (.1) yes
      anchor 5: no positive: none
    Each kept pair's gradient is (1/6)(1/50) w_an 50 with w_an = exp(50 (s_an - .5) - lse_a); the smallest,
    pair (2, 4): 50 (.174 - .5) = -16.3 against lse_2 = log(1 + e^13.3 + e^-16.3) = 13.3, w = e^-29.6: not 0.
    10 pairs. Without the miner all 22 negatives enter; the smallest gradient is pair (2, 5):
    50 (-.985 - .5) = -74.2, lse_2 = 13.3, w = e^-87.5 = 9.6e-39, times 1/300 times 50 = 1.6e-39, a float32
    subnormal but not 0: all 22 count."""
    loss = losses.MultiSimilarityLoss(alpha=2.0, beta=50.0, base=0.5)
    mined = miners.MultiSimilarityMiner(epsilon=0.1)(HAND, HAND_LABELS)
    assert torch.equal(valid_negatives_of_pairs(loss, HAND, None, mined), HAND_VALID)
    every = valid_negatives_of_pairs(loss, HAND, None, lmu.get_all_pairs_indices(HAND_LABELS))
    assert torch.equal(every, HAND_LABELS[:, None] != HAND_LABELS[None, :]) and int(every.sum()) == 22


@pytest.mark.parametrize("distance", ["cosine", "lp"])
@pytest.mark.parametrize("miner", [None, miners.PairMarginMiner(0.2, 0.8)])
@pytest.mark.parametrize("smooth", [False, True])
def test_triplet_valid_negatives_are_the_pairs_pmls_gradient_reaches(distance, miner, smooth):
    """Bugs caught: a negative counted that PML's triplet loss gives no gradient (every triplet at or past the
    margin, dropped by the AvgNonZeroReducer; an unmined pair) or one with a gradient not counted (the hinge
    taken against the wrong positive, the distance's direction flipped); ``smooth_loss`` (softplus: every
    triplet has a gradient) ignored. Per pair: count == (d loss / d D_an != 0); per row: a memory row that is
    only ever a negative (class 9 is in no query) gets a gradient only if it is in a counted pair."""
    base = {"cosine": distances.CosineSimilarity, "lp": distances.LpDistance}[distance]
    q, ql, r, rl = _data(seed=3, b=8, n=12)
    rl[:3] = 9
    q, r = q.requires_grad_(), r.requires_grad_()
    pml = losses.TripletMarginLoss(margin=0.3, smooth_loss=smooth, distance=_recorded(base))
    pairs = miner(q, ql, r, rl) if miner is not None else lmu.get_all_pairs_indices(ql, rl)
    pml(q, ql, pairs, r, rl).backward()
    got = valid_negatives_of_pairs(pml, q.detach(), r.detach(), pairs)
    want = masks_of_pairs(pairs, len(q), len(r)).neg & (pml.distance.mat.grad != 0)
    assert torch.equal(got, want) and int(got.sum()) > 0
    only_negative = rl == 9
    moved = r.grad.abs().sum(dim=1) > 0
    assert not (moved & only_negative & ~got.any(dim=0)).any()
    if not smooth and miner is None:   # some easy negatives, so the check above has something to reject
        assert int(got.sum()) < int((ql[:, None] != rl[None, :]).sum())


@pytest.mark.parametrize("miner", [None, miners.MultiSimilarityMiner(epsilon=0.1)])
@pytest.mark.parametrize("beta", [50.0, 100.0])
def test_multi_similarity_valid_negatives_are_the_pairs_pmls_gradient_reaches(miner, beta):
    """Bugs caught: MS's negatives counted where PML's gradient is zero (a pair the MS miner dropped; with
    beta = 100 a far negative whose gradient w / (beta B) x beta underflows to 0 in float32, among them pairs
    whose weight w alone is a subnormal > 0) or not counted where it is not (anchors without a positive still
    have a negative term without the miner)."""
    q, ql, r, rl = _data(seed=2, b=8, n=12)
    q = q.requires_grad_()
    pml = losses.MultiSimilarityLoss(beta=beta, distance=_recorded())
    pairs = miner(q, ql, r, rl) if miner is not None else lmu.get_all_pairs_indices(ql, rl)
    pml(q, ql, pairs, r, rl).backward()
    neg = masks_of_pairs(pairs, len(q), len(r)).neg
    got = valid_negatives_of_pairs(pml, q.detach(), r, pairs)
    assert torch.equal(got, neg & (pml.distance.mat.grad != 0)) and int(got.sum()) > 0
    if beta == 100.0:   # the underflow happens on this data: the count is not just "every negative given"
        assert int(got.sum()) < int(neg.sum())


def _memory_run(loss, miner=None, batch_loss_weight=0.0):
    """Three batches of 6 into a 20-row memory (slots 0 .. 17; the last batch at 12 .. 17)."""
    torch.manual_seed(4)
    crit = XBMLoss(loss, 4, 20, miner=miner, batch_loss_weight=batch_loss_weight)
    for _ in range(3):
        emb, labels = torch.randn(6, 4), torch.randint(0, 3, (6,))
        crit(emb, labels)
    return crit, emb, labels


@pytest.mark.parametrize("kind", ["triplet", "multi_similarity"])
def test_xbm_loss_reports_finite_valid_negatives_for_triplet_and_multi_similarity(kind):
    """Bug caught (issue 53): ``valid_neg_memory`` / ``valid_neg_batch`` NaN for the losses on PML's index path,
    or not the loss's own pairs: the memory's count must be that of the pairs XBMLoss gives the loss (self
    pairs dropped, MS's own mining), the batch's share those against this batch's slots, the in-batch loss's
    (w > 0) its own, and BatchLoss's the same as the definition's."""
    if kind == "triplet":
        loss, miner = losses.TripletMarginLoss(margin=0.1, distance=distances.CosineSimilarity()), None
    else:
        loss, miner = losses.MultiSimilarityLoss(), miners.MultiSimilarityMiner(epsilon=0.1)
    crit, emb, labels = _memory_run(loss, miner)
    stats = crit.last_stats
    refs, ref_labels, _, _ = crit.memory.valid()
    exclude = torch.zeros(6, len(refs), dtype=torch.bool)
    exclude[torch.arange(6), torch.arange(12, 18)] = True   # each query's own stored copy
    pairs = miner(emb, labels, refs, ref_labels) if miner is not None else lmu.get_all_pairs_indices(labels, ref_labels)
    masks = masks_of_pairs(pairs, 6, len(refs))
    valid = valid_negatives(loss, miner, emb, refs, PairMasks(masks.pos & ~exclude, masks.neg))
    memory, batch = float(stats["valid_neg_memory"]), float(stats["valid_neg_batch"])
    assert math.isfinite(memory) and math.isfinite(batch)
    assert memory == int(valid.sum()) > batch == int(valid[:, 12:18].sum()) > 0
    weighted, emb, labels = _memory_run(loss, miner, batch_loss_weight=0.5)
    own = miner(emb, labels) if miner is not None else lmu.get_all_pairs_indices(labels)
    in_batch = int(valid_negatives_of_pairs(loss, emb, None, own).sum())
    assert float(weighted.last_stats["valid_neg_batch"]) == in_batch > 0
    alone = BatchLoss(loss, miner)
    alone(emb, labels)
    assert float(alone.last_stats["valid_neg_batch"]) == in_batch


# valid_neg_memory, valid_neg_batch of XBMLoss (w = 0 and 0.5) and BatchLoss's valid_neg_batch for the losses on
# masks, as the code before the triplet and MS counts gave them (commit fb82e4b), on _pinned_run's data.
PINNED = {"contrastive": (25, 2, 8), "contrastive_mined": (25, 2, 8), "supcon": (78, 16, 24),
          "supcon_mined": (33, 2, 8), "ntxent": (78, 16, 24)}


@pytest.mark.parametrize("name", sorted(PINNED))
@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_mask_losses_valid_negatives_unchanged(name, weight):
    """Bug caught: the triplet / MS wiring changing the contrastive, SupCon or NT-Xent counts (the mask path's
    definition or which pairs and slots it counts), against the numbers the code gave before it."""
    contrastive = lambda: losses.ContrastiveLoss(neg_margin=0.1, distance=distances.CosineSimilarity())
    make, miner = {"contrastive": (contrastive, None), "contrastive_mined": (contrastive, miners.PairMarginMiner(0.2, 1.4)),
                   "supcon": (lambda: SupConLoss(0.1), None),
                   "supcon_mined": (lambda: SupConLoss(0.1), miners.PairMarginMiner(0.2, 1.4)),
                   "ntxent": (lambda: losses.NTXentLoss(0.1), None)}[name]
    torch.manual_seed(3)
    crit = XBMLoss(make(), 4, 20, miner=miner, batch_loss_weight=weight)
    for _ in range(4):
        crit(torch.randn(6, 4), torch.randint(0, 3, (6,)))
    batch = BatchLoss(make(), miner)
    batch(torch.randn(6, 4), torch.randint(0, 3, (6,)))
    got = tuple(int(x) for x in (crit.last_stats["valid_neg_memory"], crit.last_stats["valid_neg_batch"],
                                 batch.last_stats["valid_neg_batch"]))
    assert got == PINNED[name]
