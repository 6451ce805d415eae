"""The miner's distances (the cosine direction flip) and the memory size."""
import math

import pytest
import torch

from xbm.losses.config import MinerConfig
from xbm.losses.criteria import build_miner, memory_size

# One query [1, 0]; references at known cosine similarities: positives 0.9 and 0.3, negatives 0.8 and 0.1.
SIMS = [0.9, 0.3, 0.8, 0.1]
REFS = torch.tensor([[s, math.sqrt(1 - s * s)] for s in SIMS])
REF_LABELS = torch.tensor([0, 0, 1, 1])
QUERY, QUERY_LABELS = torch.tensor([[1.0, 0.0]]), torch.tensor([0])


def mined(distance, pos_margin, neg_margin, refs=REFS):
    miner = build_miner(MinerConfig(distance=distance, pos_margin=pos_margin, neg_margin=neg_margin))
    _, p, _, n = miner(QUERY, QUERY_LABELS, refs, REF_LABELS)
    return sorted(p.tolist()), sorted(n.tolist())


def test_cosine_margins_are_similarities_and_the_direction_flips():
    """Bug caught: miner.distance=cosine silently becoming Lp, or cosine margins read as distances: with
    similarities the hard positives are those BELOW pos_margin and the hard negatives those ABOVE
    neg_margin (hand computed from the similarities above)."""
    assert mined("cosine", 0.5, 0.5) == ([1], [2])          # positive s=0.3 < 0.5, negative s=0.8 > 0.5
    assert mined("cosine", 0.95, 0.05) == ([0, 1], [2, 3])
    # Lp on the sphere: d = sqrt(2 - 2 s) = 0.447, 1.183 (positives), 0.632, 1.342 (negatives);
    # positives with d > 0.5 and negatives with d < 0.7 are mined.
    assert mined("lp", 0.5, 0.7) == ([1], [2])
    assert mined("lp", 0.5, 0.5) == ([1], [])


def test_lp_normalises_and_lp_raw_does_not():
    """Bug caught: lp_raw normalising (adapted memory rows off the sphere would look unit-norm) or lp not."""
    far = REFS * 3.0  # distances from the unit query grow for lp_raw only
    assert mined("lp", 0.5, 0.7, far) == mined("lp", 0.5, 0.7)
    assert mined("lp_raw", 0.5, 0.7, far) == ([0, 1], [])
    assert mined("lp_raw", 0.5, 0.7) == mined("lp", 0.5, 0.7)


def test_miner_kind_none_is_no_miner():
    """Bug caught: miner.kind=none still mining (SupCon would see only the mined pairs)."""
    assert build_miner(MinerConfig(kind="none")) is None


@pytest.mark.parametrize("ratio, n, rows", [(0.3, 192, 58), (0.5, 1600, 800), (0.001, 10, 1), (1.0, 7, 7),
                                            (0.34, 100, 34)])
def test_memory_size_is_the_ceiling_of_ratio_times_the_training_set(ratio, n, rows):
    """Bug caught: floor instead of ceil (0.3 x 192 = 57.6 must give 58), or a memory of 0 rows."""
    assert memory_size(ratio, n) == rows


@pytest.mark.parametrize("labels", [[0, 0, 1, 1, 2, 2, 0, 1], list(range(8)), [3] * 8],
                         ids=["both kinds of pair", "no positive pair", "no negative pair"])
@pytest.mark.parametrize("with_refs", [False, True])
@pytest.mark.parametrize("mined", [False, True])
def test_our_supcon_equals_pmls_bit_for_bit(labels, with_refs, mined):
    """Bugs caught: the device flag that replaces PML's ``pos.any() and neg.any()`` inverted or ignored (a
    batch without negatives then has a positive loss where PML's is 0), or any other step of the loss
    changed: the loss and the gradient must equal PML's exactly, with and without references (the memory)
    and a miner, and in the three cases of PML's check."""
    from pytorch_metric_learning import losses as pml_losses, miners as pml_miners
    from xbm.losses.pair_masks import SupConLoss
    gen = torch.Generator().manual_seed(len(set(labels)))
    labels = torch.tensor(labels)
    emb = torch.randn(8, 5, generator=gen)
    refs, ref_labels = (torch.randn(12, 5, generator=gen), torch.arange(12) % 3) if with_refs else (None, None)
    miner = pml_miners.PairMarginMiner(pos_margin=0.3, neg_margin=1.5)
    pairs = miner(emb, labels, refs, ref_labels) if mined else None
    a, b = emb.clone().requires_grad_(), emb.clone().requires_grad_()
    want = pml_losses.SupConLoss(0.1)(a, labels, pairs, refs, ref_labels)
    got = SupConLoss(0.1)(b, labels, pairs, refs, ref_labels)
    want.backward()
    got.backward()
    assert torch.equal(got.detach(), want.detach())
    assert torch.equal(b.grad, a.grad)
    if not with_refs and len(set(labels.tolist())) in (1, 8):   # PML's zero loss: a batch without both kinds
        assert float(got.detach()) == 0.0
