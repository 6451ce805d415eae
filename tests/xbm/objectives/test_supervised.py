"""``objective=supervised``: the project's protocol as an objective (its methods, called directly)."""
import pytest
import torch
from pytorch_metric_learning import distances, losses, miners, samplers

from xbm.objectives import build_objective
from xbm.objectives.supervised import Supervised
from xbm.training.runtime import Runtime

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
