"""``objective=supervised``: the project's protocol as an objective (its methods, called directly)."""
import numpy as np
import pytest
import torch
from pytorch_metric_learning import distances, losses, miners, samplers

from xbm.objectives import build_objective
from xbm.objectives.supervised import Supervised
from xbm.runtime.device import Runtime

from ..conftest import tiny_config


def test_the_pair_loss_miner_and_sampler_are_the_configured_supcon_pair_margin_miner_and_m_per_class():
    """Bugs caught: the supervised objective building SupCon at PML's default temperature, the miner with
    default margins or distance (or no miner), or a sampler that ignores samples_per_class / batch_size."""
    cfg = tiny_config(**{"loss.temperature": 0.3, "miner.pos_margin": 0.15, "miner.neg_margin": 0.7,
                         "miner.distance": "cosine", "samples_per_class": 2, "batch_size": 8})
    objective = build_objective(cfg, torch.nn.Identity(), torch.arange(12) % 6)
    assert isinstance(objective, Supervised) and objective.uses_labels and objective.name == "supervised"
    loss = objective.pair_loss()
    assert isinstance(loss, losses.SupConLoss) and loss.temperature == 0.3
    miner = objective.miner()
    assert isinstance(miner, miners.PairMarginMiner) and isinstance(miner.distance, distances.CosineSimilarity)
    assert (miner.pos_margin, miner.neg_margin) == (0.15, 0.7)
    sampler = objective.sampler(torch.arange(12) % 6)
    assert isinstance(sampler, samplers.MPerClassSampler)
    assert (sampler.m_per_class, sampler.batch_size, len(sampler)) == (2, 8, 8)
    assert build_objective(tiny_config(**{"miner.kind": "none"}), torch.nn.Identity(), torch.arange(4)).miner() is None


def _passes(sampler, n: int = 3) -> list[list[int]]:
    np.random.seed(5)   # both samplers draw from NumPy's global RNG, which the trainer seeds
    return [list(sampler) for _ in range(n)]


def test_the_default_sampler_draws_the_batches_it_drew_before_sampler_existed():
    """Bug caught: adding sampler=random changing the default run's batches (another sampler, length, or RNG
    draws) for the same seed, which would make every earlier result irreproducible."""
    labels = torch.arange(60) % 12   # 12 classes x 5
    cfg = tiny_config(samples_per_class=2, batch_size=8)
    assert cfg.sampler == "m_per_class"
    for sampler in (Supervised(cfg).sampler(labels), Supervised(cfg.replace(sampler="m_per_class")).sampler(labels)):
        # the old make_sampler's, fresh: it shuffles its class list in place, so its order is state
        before = samplers.MPerClassSampler(labels, 2, batch_size=8, length_before_new_iter=60)
        assert _passes(sampler) == _passes(before)


@pytest.mark.parametrize("batch_size", [8, 10])
def test_sampler_random_is_a_permutation_of_the_training_set_per_pass(batch_size):
    """Bug caught: sampler=random still drawing class-balanced batches (XBM Fig. 6 compares against plain shuffled
    batches), drawing images twice or never in a pass, repeating one order every pass, or refusing a batch size
    that is not a multiple of samples_per_class."""
    labels = torch.arange(40) % 10   # 10 classes x 4
    sampler = Supervised(tiny_config(sampler="random", samples_per_class=2, batch_size=batch_size)).sampler(labels)
    whole = 40 // batch_size * batch_size   # the pass is cut to whole batches, as MPerClassSampler's is
    passes = _passes(sampler)
    for drawn in passes:
        assert len(drawn) == len(sampler) == whole and len(set(drawn)) == whole and set(drawn) <= set(range(40))
    assert passes[0] != passes[1]
    batches = [labels[drawn[b:b + batch_size]] for drawn in passes for b in range(0, whole, batch_size)]
    # an M-per-class batch holds batch_size / 2 classes with 2 images each; shuffled batches mostly do not
    balanced = [bool((torch.bincount(y) % 2 == 0).all()) and y.unique().numel() == batch_size // 2 for y in batches]
    assert not all(balanced)


@pytest.mark.parametrize("amp", [None, torch.bfloat16])
def test_a_batch_is_the_models_embeddings_of_the_prepared_input_with_the_given_labels_and_indices(amp):
    """Bugs caught: the batch not passed through ``prepare`` (un-normalised images reach the model), the
    forward pass outside the run's autocast, labels or indices swapped or dropped, or an enqueue mask that
    keeps part of a supervised batch out of the memory."""
    model = torch.nn.Linear(3, 2)
    x, y, idx = torch.randn(4, 3), torch.tensor([3, 3, 1, 1]), torch.tensor([10, 11, 12, 13])
    runtime = Runtime(torch.device("cpu"), amp, channels_last=False)
    batch = Supervised(tiny_config())(model, x, y, idx, lambda t: 2 * t + 1, runtime)
    with runtime.autocast():
        want = model(2 * x + 1)
    assert batch.embeddings.dtype == (amp or torch.float32)
    torch.testing.assert_close(batch.embeddings, want, rtol=0, atol=0)
    assert batch.labels is y and batch.indices is idx and batch.enqueue_mask is None
