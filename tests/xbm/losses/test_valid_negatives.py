"""Valid negatives (XBM Fig. 4) against PML's own losses: per-pair terms and gradients."""
import math

import pytest
import torch
from pytorch_metric_learning import distances, losses, miners
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from xbm.losses.criteria import BatchLoss
from xbm.losses.pair_masks import SupConLoss, pair_masks
from xbm.losses.valid_negatives import valid_negatives
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


class _Recorded(distances.CosineSimilarity):
    """PML's cosine similarity, keeping its matrix so that a test reads the loss's gradient per pair."""

    def compute_mat(self, query_emb, ref_emb):
        self.mat = super().compute_mat(query_emb, ref_emb)
        self.mat.retain_grad()
        return self.mat


@pytest.mark.parametrize("miner", [None, miners.PairMarginMiner(0.2, 0.8)])
def test_supcon_valid_negatives_are_the_pairs_pmls_gradient_reaches(miner):
    """Bug caught: SupCon's negatives counted where PML's gradient is zero (rows without a positive, rows the
    AvgNonZeroReducer drops, unmined negatives outside the softmax) or not counted where it is not."""
    q, ql, r, rl = _data(seed=1, b=8, n=12)
    ql[0] = 7   # a query without any positive: its negatives get no gradient
    pml = losses.SupConLoss(temperature=0.5, distance=_Recorded())
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
    triplet = XBMLoss(losses.TripletMarginLoss(), 4, 20)
    triplet(emb, labels)
    assert math.isnan(triplet.last_stats["valid_neg_memory"]) and math.isnan(triplet.last_stats["valid_neg_batch"])


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
