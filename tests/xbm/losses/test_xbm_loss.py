"""XBMLoss: PML CrossBatchMemory parity, adaptation order, batch loss, stats, precision, state."""
from __future__ import annotations

import pytest
import torch
from pytorch_metric_learning import losses, miners
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from tests.xbm.conftest import assert_matches_pml
from xbm.losses.xbm_loss import XBMLoss, split_rows
from xbm.normalisers import NormaliserConfig, build_normaliser

B, D = 8, 6


def _batches(n, seed=0, classes=5):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(B, D, generator=gen), torch.randint(0, classes, (B,), generator=gen)) for _ in range(n)]


def _miner():
    return miners.PairMarginMiner(pos_margin=0.2, neg_margin=0.8)


@pytest.mark.parametrize("memory_size", [B, B + 1, 2 * B + 3, 5 * B])
@pytest.mark.parametrize("setup", ["supcon+miner", "supcon", "contrastive+miner"])
@pytest.mark.parametrize("normaliser", [None, "none"])
def test_matches_pml_cross_batch_memory_with_wrap_around(memory_size, setup, normaliser):
    make_loss = losses.ContrastiveLoss if setup.startswith("contrastive") else (lambda: losses.SupConLoss(0.1))
    use_miner = setup.endswith("miner")
    pml = losses.CrossBatchMemory(make_loss(), D, memory_size, miner=_miner() if use_miner else None)
    norm = None if normaliser is None else build_normaliser(NormaliserConfig(kind=normaliser))
    ours = XBMLoss(make_loss(), D, memory_size, miner=_miner() if use_miner else None, normaliser=norm)
    assert_matches_pml(pml, ours, _batches(7, seed=memory_size))


def test_adapts_the_stored_rows_then_enqueues_then_scores_against_the_memory():
    (e1, l1), (e2, l2) = _batches(2, seed=3, classes=3)
    crit = XBMLoss(losses.SupConLoss(0.1), D, 40, normaliser=build_normaliser(NormaliserConfig(kind="xbn")))
    crit(e1, l1)
    assert crit.last_stats["adapted"] == 0.0   # nothing stored before the first batch
    e2 = e2.clone().requires_grad_()
    got = crit(e2, l2)
    adapted = build_normaliser(NormaliserConfig(kind="xbn"))(e1, l1, e2.detach(), l2)
    valid = crit.memory.valid()
    torch.testing.assert_close(valid.embeddings[:B], adapted)          # written back
    torch.testing.assert_close(valid.embeddings[B:], e2.detach(), rtol=0, atol=0)
    refs, ref_labels = torch.cat([adapted, e2.detach()]), torch.cat([l1, l2])
    a1, p, a2, n = lmu.get_all_pairs_indices(l2, ref_labels)
    own = p == a1 + B                                                   # each query's own copy
    want = losses.SupConLoss(0.1)(e2, l2, (a1[~own], p[~own], a2, n), refs, ref_labels)
    torch.testing.assert_close(got, want)
    assert crit.last_stats["memory_pos_pairs"] == float((~own).sum())
    assert crit.last_stats["memory_neg_pairs"] == float(len(a2))


def test_batch_loss_weight_adds_the_mined_in_batch_loss_and_stats_count_pairs():
    batches = _batches(3, seed=4, classes=3)
    plain = XBMLoss(losses.SupConLoss(0.1), D, 20, miner=_miner())
    star = XBMLoss(losses.SupConLoss(0.1), D, 20, miner=_miner(), batch_loss_weight=0.5)
    for emb, labels in batches:
        base, total = plain(emb, labels), star(emb, labels)
        in_batch = losses.SupConLoss(0.1)(emb, labels, _miner()(emb, labels))
        torch.testing.assert_close(total, base + 0.5 * in_batch)
        assert float(star.last_stats["batch_loss"]) == pytest.approx(float(in_batch))
        a1, _, a2, _ = _miner()(emb, labels)
        assert star.last_stats["batch_neg_pairs"] == len(a2) and star.last_stats["batch_pos_pairs"] == len(a1)
    assert plain.last_stats["memory_fill"] == 1.0 and plain.last_stats["batch_loss"] != plain.last_stats["batch_loss"]
    assert set(plain.last_stats) >= {"memory_neg_pairs", "batch_neg_pairs", "memory_fill"}


def test_batch_larger_than_memory_keeps_newest_rows_and_never_pairs_a_sample_with_itself():
    emb, labels = torch.randn(B, D), torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    crit = XBMLoss(losses.SupConLoss(0.1), D, 5)
    crit(emb, labels)
    valid = crit.memory.valid()
    torch.testing.assert_close(valid.embeddings, emb[[5, 6, 7, 3, 4]], rtol=0, atol=0)
    # Positive pairs: query j with the stored copy of its class partner only (never itself).
    partners = [(j, s) for j in range(B) for s, k in enumerate([5, 6, 7, 3, 4]) if k != j and labels[k] == labels[j]]
    assert crit.last_stats["memory_pos_pairs"] == len(partners) == 5
    assert crit.last_stats["memory_fill"] == 1.0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_embeddings_keep_an_fp32_memory(dtype):
    ref = XBMLoss(losses.SupConLoss(0.1), D, 20, normaliser=build_normaliser(NormaliserConfig(kind="pcxbn")))
    half = XBMLoss(losses.SupConLoss(0.1), D, 20, normaliser=build_normaliser(NormaliserConfig(kind="pcxbn")))
    for emb, labels in _batches(3, seed=5, classes=3):
        x = emb.to(dtype).requires_grad_()
        got, want = half(x, labels), ref(x.detach().float(), labels)
        got.backward()
        assert half.memory.embeddings.dtype == torch.float32 and x.grad.dtype == dtype
        assert torch.isfinite(x.grad.float()).all()
        torch.testing.assert_close(got.float(), want, rtol=1e-5, atol=1e-5)


def test_autocast_bf16_trains_through_the_memory():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, D)
    norm = build_normaliser(NormaliserConfig(kind="axbn"))
    crit = XBMLoss(losses.SupConLoss(0.1), D, 30, miner=_miner(), normaliser=norm)
    for _ in range(3):
        x, labels = torch.randn(B, 4), torch.randint(0, 3, (B,))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            emb = model(x)
            loss = crit(emb, labels)
        assert emb.dtype == torch.bfloat16 and crit.memory.embeddings.dtype == torch.float32
        model.zero_grad()
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(model.weight.grad).all()


def test_state_dict_round_trip_continues_identically():
    cfg = NormaliserConfig(kind="axbn", kalman_r=1.0, kalman_interval=2)
    batches = _batches(8, seed=6)
    first = XBMLoss(losses.SupConLoss(0.1), D, 2 * B + 3, miner=_miner(), normaliser=build_normaliser(cfg))
    for step, (emb, labels) in enumerate(batches[:5]):
        first(emb, labels, epoch=step, indices=torch.arange(B) + step * B)
    state = first.state_dict()
    assert int(state["memory.pointer"]) == (5 * B) % (2 * B + 3) and int(state["memory.filled"]) == 2 * B + 3
    assert int(state["iteration"]) == 5 and int(state["normaliser.calls"]) == 4
    assert int(state["memory.indices"].max()) == 5 * B - 1 and int(state["memory.iterations"].max()) == 4
    assert {"normaliser.p", "normaliser.gain", "normaliser.mu_hat", "normaliser.sigma_hat"} <= set(state)
    second = XBMLoss(losses.SupConLoss(0.1), D, 2 * B + 3, miner=_miner(), normaliser=build_normaliser(cfg))
    second.load_state_dict(state)
    for emb, labels in batches[5:]:
        torch.testing.assert_close(second(emb, labels), first(emb, labels), rtol=0, atol=0)
    torch.testing.assert_close(second.state_dict(), first.state_dict(), rtol=0, atol=0)
    assert first.memory.valid().iterations.max() == 7


def test_delay_leaves_the_memory_raw():
    (e1, l1), (e2, l2) = _batches(2, seed=7)
    crit = XBMLoss(losses.SupConLoss(0.1), D, 40,
                   normaliser=build_normaliser(NormaliserConfig(kind="xbn", delay_epochs=1)))
    crit(e1, l1, epoch=0)
    crit(e2, l2, epoch=0)
    assert crit.last_stats["adapted"] == 0.0
    torch.testing.assert_close(crit.memory.valid().embeddings, torch.cat([e1, e2]), rtol=0, atol=0)
    crit(e1, l1, epoch=1)
    assert crit.last_stats["adapted"] == 1.0


@pytest.mark.parametrize("weight", [-0.1, float("nan"), True])
def test_bad_batch_loss_weight_raises(weight):
    with pytest.raises(ValueError, match="batch_loss_weight must be >= 0"):
        XBMLoss(losses.SupConLoss(), D, 10, batch_loss_weight=weight)


def test_bad_shapes_raise():
    crit = XBMLoss(losses.SupConLoss(), D, 10)
    with pytest.raises(ValueError, match="embeddings \\[B, d\\] and labels \\[B\\]"):
        crit(torch.randn(4, D), torch.zeros(3, dtype=torch.long))


def test_a_step_without_any_pair_gives_a_zero_loss_that_backpropagates():
    emb = torch.randn(B, D, requires_grad=True)
    crit = XBMLoss(losses.SupConLoss(0.1), D, 20, normaliser=build_normaliser(NormaliserConfig(kind="xbn")))
    loss = crit(emb, torch.arange(B))   # distinct labels, memory = this batch: no positive pair
    loss.backward()
    assert float(loss.detach()) == 0.0 and crit.last_stats["memory_pos_pairs"] == 0.0
    assert crit.last_stats["memory_neg_pairs"] == B * (B - 1) and crit.last_stats["adapted"] == 0.0


def test_loss_pos_pairs_counts_the_memorys_positives_plus_the_batchs_only_with_a_batch_term():
    """Bug caught: the in-batch positives counted without a batch term (w = 0: a collapsed epoch would look
    alive) or dropped with one, or the count subtracted."""
    emb, labels = _batches(1, seed=6, classes=2)[0]
    plain = XBMLoss(losses.SupConLoss(0.1), D, 20)
    star = XBMLoss(losses.SupConLoss(0.1), D, 20, batch_loss_weight=0.5)
    plain(emb, labels)
    star(emb, labels)
    memory_pos, batch_pos = plain.last_stats["memory_pos_pairs"], plain.last_stats["batch_pos_pairs"]
    assert memory_pos > 0 and batch_pos > 0
    assert plain.last_stats["loss_pos_pairs"] == memory_pos
    assert star.last_stats["loss_pos_pairs"] == memory_pos + batch_pos


@pytest.mark.parametrize("stored, batch", [(2, 4), (4, 2)])
def test_two_rows_are_enough_to_adapt(stored, batch):
    """Bug caught: an off-by-one in the "fewer than 2 rows" guard (a memory or a batch of exactly two rows
    left raw, although both have a standard deviation)."""
    crit = XBMLoss(losses.SupConLoss(0.1), D, stored, normaliser=build_normaliser(NormaliserConfig(kind="xbn")))
    first = torch.randn(stored, D)
    crit(first, torch.arange(stored))
    crit(torch.randn(batch, D) * 3 + 1, torch.arange(batch))
    assert crit.last_stats["adapted"] == 1.0


def test_the_epoch_reaches_the_normaliser_and_defaults_to_the_first():
    """Bug caught: the epoch not passed on to the normaliser (a delayed normaliser would never adapt while the
    stats said it did), or a default epoch past 0 (a call without one would adapt during the delay)."""
    def crit():
        norm = build_normaliser(NormaliserConfig(kind="xbn", delay_epochs=1))
        loss = XBMLoss(losses.SupConLoss(0.1), D, 40, normaliser=norm)
        loss(torch.randn(B, D), torch.arange(B) % 3)
        return loss

    early = crit()
    early(torch.randn(B, D) * 3 + 1, torch.arange(B) % 3)
    assert early.last_stats["adapted"] == 0.0
    late = crit()
    raw = late.memory.valid().embeddings.clone()
    late(torch.randn(B, D) * 3 + 1, torch.arange(B) % 3, epoch=1)
    assert late.last_stats["adapted"] == 1.0 and not torch.allclose(late.memory.valid().embeddings[:B], raw)


def test_with_an_enqueue_mask_only_keys_enter_the_memory_with_their_indices_and_queries_score_against_them():
    """Bug caught (MoCo's path): queries enqueued instead of keys, the keys' sample indices lost (staleness
    could not re-embed them), or queries paired with the wrong rows."""
    q, k = torch.randn(4, D), torch.randn(4, D)
    ids = torch.tensor([10, 11, 12, 13])
    crit = XBMLoss(losses.NTXentLoss(0.1), D, 12)
    mask = torch.tensor([False] * 4 + [True] * 4)
    got = crit(torch.cat([q, k]), torch.cat([ids, ids]), indices=torch.cat([ids, ids]) + 100, enqueue_mask=mask)
    stored = crit.memory.valid()
    torch.testing.assert_close(stored.embeddings, k, rtol=0, atol=0)
    assert stored.labels.tolist() == ids.tolist() and stored.indices.tolist() == (ids + 100).tolist()
    refs = ids.clone()  # not the same tensor: PML would drop the diagonal as self pairs
    want = losses.NTXentLoss(0.1)(q, ids, lmu.get_all_pairs_indices(ids, refs), k, refs)
    torch.testing.assert_close(got, want)
    assert crit.last_stats["memory_pos_pairs"] == 4.0  # each query with its own key, no self pair dropped


def test_the_enqueue_mask_splits_on_the_host_into_positions_on_the_rows_device():
    """Bugs caught: key and query positions swapped or out of order (an interleaved mask), or left on the CPU
    for rows on the GPU ("meta" stands in)."""
    mask = torch.tensor([True, False, False, True, False])
    keys, queries = split_rows(mask, torch.device("meta"))
    assert keys.device.type == queries.device.type == "meta" and keys.dtype == queries.dtype == torch.long
    keys, queries = split_rows(mask, torch.device("cpu"))
    assert keys.tolist() == [0, 3] and queries.tolist() == [1, 2, 4]


def test_the_iteration_counter_is_an_integer():
    """Bug caught: a float32 counter, which stops counting exactly after 2^24 steps (long runs)."""
    assert XBMLoss(losses.SupConLoss(0.1), D, 4).iteration.dtype == torch.long


def test_an_enqueue_mask_keeps_each_rows_own_label_and_needs_no_indices():
    """Bug caught: the queries given the keys' labels (a mask applied the wrong way round to the labels), or
    sample indices required with a mask (a caller without them would crash)."""
    q, k = torch.randn(2, D), torch.randn(2, D)
    crit = XBMLoss(losses.NTXentLoss(0.1), D, 8)
    got = crit(torch.cat([q, k]), torch.tensor([0, 1, 1, 2]), enqueue_mask=torch.tensor([False, False, True, True]))
    assert crit.memory.valid().labels.tolist() == [1, 2] and crit.memory.valid().indices.tolist() == [-1, -1]
    refs = torch.tensor([1, 2])
    want = losses.NTXentLoss(0.1)(q, torch.tensor([0, 1]), lmu.get_all_pairs_indices(torch.tensor([0, 1]), refs), k, refs)
    torch.testing.assert_close(got, want)
    assert crit.last_stats["memory_pos_pairs"] == 1.0  # only query 1 has a key of its label


@pytest.mark.parametrize("distance", ["lp", "lp_raw", "cosine"])
@pytest.mark.parametrize("memory_size", [B - 3, B, 3 * B + 1])
@pytest.mark.parametrize("normaliser", [None, "pcxbn"])
def test_in_batch_counts_come_from_the_memory_mining_and_equal_a_second_mining(distance, memory_size, normaliser):
    """Bugs caught: the in-batch pair counts (w = 0) taken from pairs with older memory rows, with the
    batch's own copies (self pairs), or from the memory's adapted rows instead of this batch's; the counts
    differing from what mining the batch a second time gave (the numbers the epoch rows report), also for
    a memory smaller than the batch (B - 3), which does not keep every row and mines them again."""
    from xbm.registries import MINER_DISTANCES as DISTANCES
    margins = {"lp": (0.6, 1.2), "lp_raw": (3.0, 3.8), "cosine": (0.7, 0.1)}[distance]   # selective margins
    miner = miners.PairMarginMiner(*margins, distance=DISTANCES[distance]())
    mined, counted = [0, 0], [0, 0]
    norm = None if normaliser is None else build_normaliser(NormaliserConfig(kind=normaliser))
    crit = XBMLoss(losses.SupConLoss(0.1), D, memory_size, miner=miner, normaliser=norm)
    for emb, labels in _batches(4, seed=11, classes=3):
        crit(emb, labels)
        a1, _, a2, _ = miner(emb, labels)
        pos, neg = crit.last_stats["batch_pos_pairs"], crit.last_stats["batch_neg_pairs"]
        if memory_size >= B:   # counted on the device, read once per epoch
            assert isinstance(pos, torch.Tensor) and pos.dim() == 0
        assert (int(pos), int(neg)) == (len(a1), len(a2))
        mined, counted = [mined[0] + len(a1), mined[1] + len(a2)], [counted[0] + int(pos), counted[1] + int(neg)]
    # the margins select some pairs and leave others: the counts are not trivial
    assert counted == mined and 0 < mined[0] and 0 < mined[1] < 4 * 40


def test_moco_in_batch_counts_cover_every_row_pair_without_a_miner():
    """Bug caught: with MoCo's keys (``enqueue_mask``) the in-batch counts taken from the memory pairs,
    which pair queries with keys only, instead of every pair of the batch's rows (all pairs: no miner)."""
    ids = torch.tensor([0, 1, 2, 0, 1, 2])
    is_key = torch.tensor([False, False, False, True, True, True])
    crit = XBMLoss(losses.NTXentLoss(0.1), D, 12)
    crit(torch.randn(6, D), ids, enqueue_mask=is_key, indices=ids)
    a1, _, a2, _ = lmu.get_all_pairs_indices(ids)
    assert (int(crit.last_stats["batch_pos_pairs"]), int(crit.last_stats["batch_neg_pairs"])) == (6, 24)
    assert (len(a1), len(a2)) == (6, 24)


@pytest.mark.parametrize("memory_size", [B - 3, B, B + 1, 3 * B + 1])
@pytest.mark.parametrize("distance", [None, "lp", "cosine"])
@pytest.mark.parametrize("weight", [0.0, 0.5])
@pytest.mark.parametrize("normaliser", [None, "pcxbn"])
def test_the_mask_path_equals_pmls_index_pairs(memory_size, distance, weight, normaliser):
    """Bugs caught (issue 18's sync-free step): the mask path (our SupCon, ``xbm.losses.pair_masks``) pairing a query
    with its own stored copy (or an overwritten slot -1 with slot 0), counting other pairs than PML's index
    path, or computing another loss or gradient; with a batch larger than the memory, a batch term, and an
    adapted memory. The same sequence through PML's own SupCon (index tuples) is the reference."""
    from xbm.registries import MINER_DISTANCES as DISTANCES
    from xbm.losses.pair_masks import SupConLoss
    margins = {"lp": (0.6, 1.2), "cosine": (0.7, 0.1)}

    def make(loss):
        miner = None if distance is None else miners.PairMarginMiner(*margins[distance], distance=DISTANCES[distance]())
        norm = None if normaliser is None else build_normaliser(NormaliserConfig(kind=normaliser))
        return XBMLoss(loss, D, memory_size, miner=miner, normaliser=norm, batch_loss_weight=weight)

    masked, indexed = make(SupConLoss(0.1)), make(losses.SupConLoss(0.1))
    assert masked.masks and not indexed.masks
    for step, (emb, labels) in enumerate(_batches(5, seed=memory_size, classes=3)):
        a, b = emb.clone().requires_grad_(), emb.clone().requires_grad_()
        got, want = masked(a, labels, epoch=step), indexed(b, labels, epoch=step)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-7)
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-5, atol=1e-7)
        for name in ("memory_pos_pairs", "memory_neg_pairs", "batch_pos_pairs", "batch_neg_pairs", "loss_pos_pairs"):
            assert float(masked.last_stats[name]) == float(indexed.last_stats[name]), name
        torch.testing.assert_close(masked.memory.valid().embeddings, indexed.memory.valid().embeddings)
