"""Neighbour-mined positives (``objective=neighbours``): tuples from the candidate pool, one pseudo-label each."""
import math

import pytest
import torch

from ..conftest import tiny_config, tiny_trainer

VALUES = {"objective": "neighbours", "neighbours.threshold": 0.3, "neighbours.pool": 10, "batch_size": 32}


def test_a_batch_is_anchors_each_followed_by_its_pool_members_above_the_threshold():
    """Bug caught: tuples built from the wrong pool rows, members below the threshold used as positives, or
    the pool not refreshed before the pass (an empty pool)."""
    trainer = tiny_trainer(**VALUES)
    batches = trainer._batches("epoch 1/1", epoch_index=0)
    pool, sims = trainer.objective.pool_indices, trainer.objective.pool_similarities
    assert pool.shape == (len(trainer.splits.train), 10)
    x, y, idx = next(iter(batches))
    for anchor, *members in idx.view(-1, 4).tolist():
        passing = [int(m) for m, s in zip(pool[anchor], sims[anchor]) if s >= 0.3][:3]
        assert members == passing + [anchor] * (3 - len(passing))


def test_each_tuple_shares_the_anchors_index_as_its_pseudo_label():
    """Bug caught: pseudo-labels that repeat across steps (the memory's rows of other tuples would become
    positives) or that split a tuple."""
    trainer = tiny_trainer(**VALUES)
    idx = torch.tensor([5, 9, 9, 2, 7, 1, 7, 7])
    x = torch.randn(8, trainer.splits.input_shape[0])
    batch = trainer.objective(trainer.model, x, torch.zeros(8, dtype=torch.long), idx, lambda v: v, trainer.runtime)
    assert batch.labels.tolist() == [5, 5, 5, 5, 7, 7, 7, 7]
    assert batch.indices.tolist() == idx.tolist()  # the memory keeps each row's own sample (staleness)


def test_the_loss_is_eq_3_9_on_cosine_similarities():
    """Bug caught: a Euclidean distance, the wrong margin, or a positive term other than -S (+1)."""
    trainer = tiny_trainer(**VALUES, **{"neighbours.neg_margin": 0.25})
    loss = trainer.objective.pair_loss()
    a = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    # positives: (0,1),(1,0): 1 - 0.6 each; negatives with S > 0.25: (1,2),(2,1): 0.8 - 0.25 each; (0,2): S = 0
    # PML averages positives and negatives over their non-zero terms and adds them: 0.4 + 0.55
    assert float(loss(a, labels)) == pytest.approx(0.4 + 0.55)


def test_pool_diagnostics_count_found_neighbours_and_their_precision():
    """Bug caught: the found fraction computed over the pool instead of the k slots, '>' for the threshold's
    '>=', the precision counting the other classes, or a division by zero when nothing is found."""
    trainer = tiny_trainer(**VALUES)
    objective = trainer.objective
    objective.pool_indices = torch.tensor([[1, 2], [0, 2], [0, 1]])
    objective.pool_similarities = torch.tensor([[0.9, 0.1], [0.3, 0.2], [0.5, 0.4]])  # 0.3: at the threshold
    objective.k = 2
    # found (>= 0.3): (0->1), (1->0), (2->0), (2->1): 4 of the 6 slots
    objective._train_labels = torch.tensor([0, 0, 0])  # one class: every found neighbour is right
    assert objective._pool_metrics() == {"neighbour_found_fraction": 4 / 6, "neighbour_precision": 1.0}
    objective._train_labels = torch.tensor([0, 1, 1])  # only 2->1 is of the anchor's class
    assert objective._pool_metrics() == {"neighbour_found_fraction": 4 / 6, "neighbour_precision": 0.25}
    objective.pool_similarities = torch.full((3, 2), -0.5)
    metrics = objective._pool_metrics()
    assert metrics["neighbour_found_fraction"] == 0.0 and math.isnan(metrics["neighbour_precision"])


def test_the_pool_is_built_before_the_first_pass_and_rebuilt_every_refresh_epochs():
    """Bug caught: the pool not rebuilt after the warm-up (epoch 0), rebuilt every epoch, or on the wrong
    epochs (refresh_epochs ignored)."""
    from xbm.objectives import neighbours

    trainer = tiny_trainer(**VALUES, **{"neighbours.refresh_epochs": 2})
    built = []
    real = neighbours.build_pool
    neighbours.build_pool = lambda e, size: built.append(epoch) or real(e, size)
    try:
        for epoch in (-1, 0, 1, 2, 3, 4):  # -1: the warm-up
            trainer.objective.begin_epoch(epoch, trainer._embed_training_set, trainer.loader.sampler.sampler)
    finally:
        neighbours.build_pool = real
    assert built == [-1, 0, 2, 4]


@pytest.mark.filterwarnings("ignore:for pool_:UserWarning")  # meta copies are no-ops, as torch warns
def test_a_fresh_objective_reports_no_metrics_and_loads_a_pool_onto_its_own_device():
    """Bugs caught (mutation testing): ``epoch_metrics`` of an objective that has not built a pool yet not a
    dict (``None``: the trainer's ``metrics.update`` would crash); a checkpointed pool restored to the
    CPU (``device`` dropped or None) in an objective on the GPU ("meta" stands in for it)."""
    from xbm.objectives.neighbours import Neighbours

    objective = Neighbours(tiny_config(**VALUES), torch.arange(3))
    assert objective.epoch_metrics() == {}
    state = {"pool_indices": torch.tensor([[1, 2], [0, 2], [0, 1]]), "pool_similarities": torch.rand(3, 2)}
    objective.to("meta").load_state_dict(state)
    for name in state:
        buffer = getattr(objective, name)
        assert (buffer.device.type, buffer.shape, buffer.dtype) == ("meta", (3, 2), state[name].dtype)
