"""``loss.kind``: each registry entry is PML's loss, equals PML's ``CrossBatchMemory`` around it, and sees the
normalised memory."""
from __future__ import annotations

import math

import pytest
import torch
from pytorch_metric_learning import distances, losses, miners
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from tests.xbm.conftest import assert_matches_pml
from xbm.config import TrainConfig
from xbm.losses.config import LossConfig, MinerConfig
from xbm.losses.criteria import BatchLoss, build_miner, build_pair_miner
from xbm.losses.kinds import LOSSES, build_loss, own_miner
from xbm.losses.xbm_loss import XBMLoss
from xbm.normalisers import NormaliserConfig, build_normaliser

B, D = 8, 6

# kind -> (our config, PML's loss and miner built by hand with the same parameters); non-default values
# everywhere, so a parameter that does not reach PML's constructor changes the numbers.
SETUPS = {
    "supcon": (LossConfig(kind="supcon", temperature=0.2), MinerConfig(),
               lambda: (losses.SupConLoss(temperature=0.2), miners.PairMarginMiner(0.2, 0.8))),
    "contrastive": (LossConfig(kind="contrastive", pos_margin=0.9, neg_margin=0.3), MinerConfig(kind="none"),
                    lambda: (losses.ContrastiveLoss(0.9, 0.3, distance=distances.CosineSimilarity()), None)),
    "contrastive_lp": (LossConfig(kind="contrastive", distance="lp", pos_margin=0.1, neg_margin=1.1), MinerConfig(),
                       lambda: (losses.ContrastiveLoss(0.1, 1.1), miners.PairMarginMiner(0.2, 0.8))),
    "triplet": (LossConfig(kind="triplet", margin=0.3), MinerConfig(kind="none"),
                lambda: (losses.TripletMarginLoss(0.3, distance=distances.CosineSimilarity()), None)),
    "triplet_mined": (LossConfig(kind="triplet", distance="lp", margin=0.2), MinerConfig(),
                      lambda: (losses.TripletMarginLoss(0.2), miners.PairMarginMiner(0.2, 0.8))),
    "multi_similarity": (LossConfig(kind="multi_similarity", alpha=3.0, beta=20.0, base=0.4, ms_epsilon=0.2),
                         MinerConfig(kind="none"),
                         lambda: (losses.MultiSimilarityLoss(3.0, 20.0, 0.4), miners.MultiSimilarityMiner(0.2))),
    "multi_similarity_unmined": (LossConfig(kind="multi_similarity", alpha=3.0, beta=20.0, base=0.4, ms_mining=False),
                                 MinerConfig(kind="none"), lambda: (losses.MultiSimilarityLoss(3.0, 20.0, 0.4), None)),
    "ntxent": (LossConfig(kind="ntxent", temperature=0.3), MinerConfig(),
               lambda: (losses.NTXentLoss(0.3), miners.PairMarginMiner(0.2, 0.8))),
}


def _ours(name):
    loss_cfg, miner_cfg, _ = SETUPS[name]
    return build_loss(loss_cfg), build_pair_miner(loss_cfg, miner_cfg)


def _batches(n, seed=0, classes=3):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(B, D, generator=gen), torch.randint(0, classes, (B,), generator=gen)) for _ in range(n)]


def test_every_kind_is_set_up_here():
    """Bug caught: a kind added to the registry (or to config's list) without a parity case below."""
    assert {cfg.kind for cfg, _, _ in SETUPS.values()} == set(LOSSES)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_the_registry_builds_pmls_loss_with_the_configs_parameters(name):
    """Bugs caught: a kind mapped to the wrong PML class, a parameter (margin, alpha, temperature, distance,
    MS's epsilon) not passed on, or MS's own miner missing or present without ``ms_mining``."""
    loss, miner = _ours(name)
    want_loss, want_miner = SETUPS[name][2]()
    assert isinstance(loss, type(want_loss))
    for attr in ("temperature", "pos_margin", "neg_margin", "margin", "alpha", "beta", "base"):
        assert getattr(loss, attr, None) == getattr(want_loss, attr, None), attr
    assert type(loss.distance) is type(want_loss.distance)
    assert type(miner) is type(want_miner)
    for attr in ("epsilon", "pos_margin", "neg_margin"):
        assert getattr(miner, attr, None) == getattr(want_miner, attr, None), attr


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_with_kind_none_each_loss_equals_pmls_cross_batch_memory_over_wrap_around(name):
    """Bug caught: a loss whose pairs or triplets against the memory differ from PML's ``CrossBatchMemory``
    (self pairs kept, triplets not built from memory pairs, MS's miner bypassed, the memory's order wrong after
    the ring wraps): loss and gradients must agree on 4 steps through a memory of B + 3 rows (it wraps at step
    2 and again at step 3)."""
    loss, miner = _ours(name)
    pml_loss, pml_miner = SETUPS[name][2]()
    size = B + 3
    pml = losses.CrossBatchMemory(pml_loss, D, size, miner=pml_miner)
    ours = XBMLoss(loss, D, size, miner=miner, normaliser=build_normaliser(NormaliserConfig(kind="none")))
    values = assert_matches_pml(pml, ours, _batches(4, seed=7))
    assert sum(v > 0 for v in values) >= 3   # the comparison is between real losses, not zeros


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_the_in_batch_loss_is_pmls_loss_with_the_same_miner(name):
    """Bug caught: the no-memory baseline (``BatchLoss``) calling a loss without its miner (MS's own mining
    lost) or with pairs PML would not build (all pairs, diagonal excluded, when there is no miner)."""
    loss, miner = _ours(name)
    pml_loss, pml_miner = SETUPS[name][2]()
    emb, labels = _batches(1, seed=2)[0]
    tuples = pml_miner(emb, labels) if pml_miner is not None else None
    torch.testing.assert_close(BatchLoss(loss, miner)(emb, labels), pml_loss(emb, labels, tuples))


def _xbn(rows, batch):
    """XBN by hand (AXBN paper Eq. 6): per dimension, z' = (z - mean_R) / std_R * std_B + mean_B, Bessel std."""
    return (rows - rows.mean(0)) / rows.std(0) * batch.std(0) + batch.mean(0)


@pytest.mark.parametrize("name", sorted(SETUPS))
def test_with_xbn_the_normalised_memory_reaches_the_loss(name):
    """Bug caught: a loss scored against the raw stored rows instead of the XBN-adapted ones (or the adapted
    rows not written back): step 2's loss must equal PML's loss of the batch against [XBN(step 1's rows),
    batch], with each query's own copy dropped, computed by hand here."""
    loss, miner = _ours(name)
    pml_loss, pml_miner = SETUPS[name][2]()
    crit = XBMLoss(loss, D, 40, miner=miner, normaliser=build_normaliser(NormaliserConfig(kind="xbn")))
    (e1, l1), (e2, l2) = _batches(2, seed=11)
    crit(e1 * 3.0 + 1.0, l1)     # stored rows far from the next batch's moments: adapting them matters
    got = crit(e2, l2, epoch=1)
    refs, ref_labels = torch.cat([_xbn(e1 * 3.0 + 1.0, e2), e2]), torch.cat([l1, l2])
    pairs = pml_miner(e2, l2, refs, ref_labels) if pml_miner is not None else lmu.get_all_pairs_indices(l2, ref_labels)
    a1, p, a2, n = pairs
    own = p == a1 + B
    want = pml_loss(e2, l2, (a1[~own], p[~own], a2, n), refs, ref_labels)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    raw = torch.cat([e1 * 3.0 + 1.0, e2])
    unadapted = pml_loss(e2, l2, lmu.remove_self_comparisons(
        pml_miner(e2, l2, raw, ref_labels) if pml_miner is not None else lmu.get_all_pairs_indices(l2, ref_labels),
        torch.arange(B, 2 * B), 40), raw, ref_labels)
    assert not torch.isclose(want, unadapted)   # the check can tell the two apart


def test_own_miner_only_for_ms_with_its_mining():
    """Bug caught: MS's miner handed to another loss, or kept when ``ms_mining`` is off."""
    assert isinstance(own_miner(LossConfig(kind="multi_similarity")), miners.MultiSimilarityMiner)
    assert own_miner(LossConfig(kind="multi_similarity", ms_mining=False)) is None
    assert own_miner(LossConfig(kind="contrastive")) is None
    assert build_pair_miner(LossConfig(kind="triplet"), MinerConfig(kind="none")) is None
    assert type(build_pair_miner(LossConfig(), MinerConfig())) is type(build_miner(MinerConfig()))


@pytest.mark.parametrize("values, message", [
    ({"loss.kind": "bogus"}, "loss.kind must satisfy one of ['supcon', 'contrastive', 'triplet', 'multi_similarity', "
                             "'ntxent'], but got 'bogus'"),
    ({"loss.kind": "contrastive", "loss.distance": "lp", "loss.pos_margin": 0.5, "loss.neg_margin": 0.5},
     "loss.neg_margin must satisfy neg_margin > pos_margin=0.5 in distance form"),
    ({"loss.kind": "contrastive", "loss.pos_margin": 0.3, "loss.neg_margin": 0.5},
     "loss.pos_margin must satisfy pos_margin > neg_margin=0.5 in similarity form"),
    ({"loss.kind": "ntxent", "loss.temperature": 0.0}, "loss.temperature must satisfy > 0, but got 0.0"),
    ({"loss.distance": "dot"}, "loss.distance must satisfy one of ['cosine', 'lp']"),
    ({"loss.kind": "multi_similarity", "miner.kind": "pair_margin"},
     "miner.kind must satisfy none when loss.kind=multi_similarity with loss.ms_mining=true"),
    ({"loss.base": 1.5}, "loss.base must satisfy -1 <= base <= 1"),
    ({"loss.kind": "triplet", "loss.margin": -0.1}, "loss.margin must satisfy >= 0"),
    ({"objective": "instance", "loss.kind": "triplet"}, "loss.kind must satisfy supcon (the default) under "
                                                        "objective=instance"),
])
def test_bad_loss_values_name_the_rule_and_the_choices(values, message):
    """Bugs caught: an unknown loss kind, margins that make the contrastive loss penalise every pair (or none),
    a zero temperature (division by zero), MS mining twice, a loss kind silently ignored by a label-free
    objective: each accepted instead of refused with the rule."""
    with pytest.raises(ValueError, match=None) as err:
        TrainConfig.from_dict(values)
    assert message in str(err.value)


def test_margins_of_a_loss_not_in_use_are_not_checked():
    """Bug caught: the contrastive rule refusing SupCon runs whose unused margins are in the other order."""
    assert TrainConfig.from_dict({"loss.pos_margin": 0.1, "loss.neg_margin": 0.9}).loss.kind == "supcon"
    assert TrainConfig.from_dict({"loss.kind": "multi_similarity", "loss.ms_mining": False}).miner.kind == "pair_margin"


@pytest.mark.parametrize("kind", sorted(LOSSES))
@pytest.mark.parametrize("memory", [False, True])
def test_every_loss_trains_in_the_trainer_with_and_without_the_memory(kind, memory):
    """Bug caught: a loss kind that the trainer's warm-up, in-batch or memory path cannot call (an index tuple
    it rejects, MS's miner handed to the warm-up, an XBN memory in the loss's fp32 path), or that trains on no
    pair at all: two warm-up and two main epochs on the toy set, every value finite and pairs in the loss."""
    from ..conftest import tiny_trainer

    values = {"loss.kind": kind, "miner.kind": "none", "memory.enabled": memory, "normaliser.kind": "xbn",
              "epochs": 2, "warmup_epochs": 2}
    rows = list(tiny_trainer(**values).fit())
    assert all(math.isfinite(r["loss"]) and r["loss"] > 0 for r in rows)
    assert all(r["loss_pos_pairs"] > 0 for r in rows) and 0.0 <= rows[-1]["recall_at_1"] <= 1.0


@pytest.mark.parametrize("kind", ["none", "xbn", "axbn", "ema", "pcxbn", "scxbn"])
@pytest.mark.parametrize("name", sorted(SETUPS))
def test_every_loss_scores_against_every_normalisers_memory(name, kind):
    """Bug caught: a loss that cannot take a normaliser's memory (its dtype, its off-sphere rows) or a
    normaliser whose adapted rows do not reach the loss: over 3 steps the loss must equal PML's loss of the
    batch against the rows the memory holds after the step (its own copies dropped), with finite gradients."""
    loss, miner = _ours(name)
    pml_loss, pml_miner = SETUPS[name][2]()
    superclass_of = torch.tensor([0, 1, 0])
    crit = XBMLoss(loss, D, 2 * B + 3, miner=miner,
                   normaliser=build_normaliser(NormaliserConfig(kind=kind), superclass_of=superclass_of))
    for step, (emb, labels) in enumerate(_batches(3, seed=13)):
        x = (emb * (1 + step)).requires_grad_()
        got = crit(x, labels, epoch=step)
        refs, ref_labels, _, _ = crit.memory.valid()
        refs, ref_labels = refs.clone(), ref_labels.clone()
        slots = (torch.arange(B) + step * B) % (2 * B + 3)   # where this batch was written
        pairs = pml_miner(x, labels, refs, ref_labels) if pml_miner is not None else lmu.get_all_pairs_indices(
            labels, ref_labels)
        a1, p, a2, n = pairs
        keep = slots[a1] != p
        want = pml_loss(x, labels, (a1[keep], p[keep], a2, n), refs, ref_labels)
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
        got.backward()
        assert torch.isfinite(x.grad).all()
    assert crit.last_stats["adapted"] == (0.0 if kind == "none" else 1.0)


@pytest.mark.parametrize("kind", sorted(LOSSES))
def test_every_loss_kind_alone_resolves_its_miner_and_validates(kind):
    """Bug caught (issue 32 item 7): ``--set loss.kind=multi_similarity`` alone exiting 2, because the default
    miner.kind=pair_margin conflicted with MS's own mining; ``auto`` must resolve to no miner for MS with its
    mining and to the pair-margin miner for every other loss, in the recorded config and in the built miner."""
    from xbm.losses.config import resolve_miner_kind

    cfg = TrainConfig.from_dict({"dataset": "toy", "model": "mlp", "loss.kind": kind})
    want = "none" if kind == "multi_similarity" else "pair_margin"
    assert cfg.miner.kind == want == cfg.to_dict()["miner.kind"] == resolve_miner_kind("auto", cfg.loss)
    miner = build_pair_miner(cfg.loss, MinerConfig())   # auto, resolved where the miner is built too
    assert type(miner) is (miners.MultiSimilarityMiner if kind == "multi_similarity" else miners.PairMarginMiner)
    unmined = TrainConfig.from_dict({"loss.kind": kind, "loss.ms_mining": False})
    assert unmined.miner.kind == "pair_margin" and TrainConfig.from_dict(cfg.to_dict()) == cfg
