"""XBMLoss with ``update="indexed"``: the loss against one row per sample, computed by hand with PML's loss."""
from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning import losses
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from xbm.losses.pair_masks import SupConLoss
from xbm.losses.xbm_loss import XBMLoss
from xbm.normalisers import NormaliserConfig, build_normaliser

D, SIZE = 4, 10
# two batches of 4 rows; the second overwrites samples 7 and 1 of the first and adds 5 and 9
INDICES = (torch.tensor([7, 1, 3, 0]), torch.tensor([5, 7, 9, 1]))
LABELS = (torch.tensor([0, 1, 0, 2]), torch.tensor([1, 0, 2, 1]))


def _batches():
    gen = torch.Generator().manual_seed(5)
    return [torch.randn(4, D, generator=gen) for _ in INDICES]


def _by_hand(stored: dict[int, tuple[torch.Tensor, int]], queries, labels, indices):
    """The PML SupCon loss of ``queries`` against the stored rows (sample index -> (row, label)) in index order,
    every pair but each query with its own stored row."""
    order = sorted(stored)
    refs = torch.stack([stored[i][0] for i in order])
    ref_labels = torch.tensor([stored[i][1] for i in order])
    a1, p, a2, n = lmu.get_all_pairs_indices(labels, ref_labels)
    own = torch.tensor([order.index(int(i)) for i in indices])
    keep = p != own[a1]
    return losses.SupConLoss(0.1)(queries, labels, (a1[keep], p[keep], a2, n), refs, ref_labels)


@pytest.mark.parametrize("loss", [SupConLoss(0.1), losses.SupConLoss(0.1)], ids=["masks", "pml_pairs"])
def test_the_loss_sees_each_sample_once_at_its_newest_row_without_its_own_copy(loss):
    """Values against a hand computation. Bug caught: a sample's row written elsewhere (the ring's pointer), an
    old copy of a sample left beside its new one, unwritten zero rows (label 0) used as references, or a query's
    own stored row kept as its positive (positions of the written rows, not slots, must be excluded)."""
    crit = XBMLoss(loss, D, SIZE, update="indexed")
    stored: dict[int, tuple[torch.Tensor, int]] = {}
    for embeddings, labels, indices in zip(_batches(), LABELS, INDICES):
        got = crit(embeddings, labels, indices=indices)
        stored.update({int(i): (row, int(y)) for i, row, y in zip(indices, embeddings, labels)})
        torch.testing.assert_close(got, _by_hand(stored, embeddings, labels, indices))
        assert crit.last_stats["memory_fill"] == len(stored) / SIZE
    assert crit.memory.valid().indices.tolist() == [0, 1, 3, 5, 7, 9]


def test_a_ring_update_still_keeps_the_old_copies():
    """The default is the ring (PML parity, tests/xbm/losses/test_xbm_loss.py): both copies of samples 7 and 1
    stay. Bug caught: the indexed layout leaking into ``update="ring"``."""
    crit = XBMLoss(SupConLoss(0.1), D, SIZE)
    for embeddings, labels, indices in zip(_batches(), LABELS, INDICES):
        crit(embeddings, labels, indices=indices)
    assert crit.memory.valid().indices.tolist() == [7, 1, 3, 0, 5, 7, 9, 1]


def test_the_normaliser_adapts_the_written_rows_of_a_partly_filled_memory_in_place():
    """Bug caught: adapted rows lost (``valid()`` of a partly written indexed memory is a copy) or written back
    to the first rows instead of the samples' rows."""
    crit = XBMLoss(SupConLoss(0.1), D, SIZE, normaliser=build_normaliser(NormaliserConfig(kind="xbn")),
                   update="indexed")
    (e1, e2), (l1, l2), (i1, i2) = _batches(), LABELS, INDICES
    crit(e1, l1, indices=i1)
    crit(e2, l2, indices=i2)
    order = i1.argsort()   # the stored rows in row order: samples 0, 1, 3, 7
    adapted = build_normaliser(NormaliserConfig(kind="xbn"))(e1[order], l1[order], e2, l2)
    memory = crit.memory.embeddings
    torch.testing.assert_close(memory[[0, 3]], adapted[[0, 2]])     # samples 0 and 3: adapted, not overwritten
    torch.testing.assert_close(memory[i2], e2, rtol=0, atol=0)       # this batch's rows: as they came
    assert not memory[[2, 4, 6, 8]].any()                            # never written


def test_an_unknown_update_is_refused():
    with pytest.raises(ValueError, match=r"update must be one of \['ring', 'indexed'\], but got 'fifo'"):
        XBMLoss(SupConLoss(0.1), D, SIZE, update="fifo")
