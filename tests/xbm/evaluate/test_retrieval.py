"""xbm/evaluate/retrieval.py: the neighbours shown to people are the evaluation's neighbours."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from tests.xbm.embedder_fixture import omniglot_mlp_trainer
from xbm.evaluate.retrieval import nearest, spread_queries, split_neighbours


def test_nearest_orders_by_cosine_and_leaves_a_row_out_of_its_own_list():
    """Bug caught: farthest first, similarities of the wrong pairs, a row its own neighbour."""
    rows = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.8, 0.6], [0.0, 1.0], [-1.0, 0.0]]), dim=1)
    indices, sims = nearest(rows, 2)
    assert indices.tolist() == [[1, 2], [0, 2], [1, 0], [2, 1]]  # row 3: cos 0 with row 2, -0.8 with row 1
    assert torch.allclose(sims, torch.tensor([[0.8, 0.0], [0.8, 0.6], [0.6, 0.0], [0.0, -0.8]]), atol=1e-6)
    indices, sims = nearest(rows[:1], 1, rows[1:])
    assert indices.tolist() == [[0]] and abs(float(sims[0, 0]) - 0.8) < 1e-6
    with pytest.raises(ValueError, match="k must be in"):
        nearest(rows, 4)


def test_spread_queries_covers_the_split():
    assert spread_queries(16, 8).tolist() == [0, 2, 4, 6, 9, 11, 13, 15] and spread_queries(3, 8).tolist() == [0, 1, 2]


def test_split_neighbours_are_the_trainers_evaluation_neighbours(tmp_path):
    """Bug caught: the report's figure embeds the test split another way than evaluation (no polarity flip,
    other statistics) or mixes up query and neighbour labels (brute force over the trainer's embeddings)."""
    trainer = omniglot_mlp_trainer(tmp_path / "data")
    payload = {"model": trainer.model.state_dict(), "config": trainer.cfg.to_dict(), "epoch": 1}
    found = split_neighbours(payload, queries=8, k=5, device="cpu")
    split = trainer.splits.test
    assert split.gallery is None  # omniglot: leave-one-out among the test drawings
    z, labels = trainer.embed(trainer.model, split.query)
    picks = spread_queries(len(z), 8)
    assert len(picks) == 8
    sims = (z @ z.T).numpy().astype(np.float64)
    for row, p in enumerate(picks):
        sims[p, p] = -np.inf
        order = np.argsort(-sims[p], kind="stable")[:5]
        assert np.allclose(found["similarities"][row], sims[p, order], atol=1e-5)
        assert found["neighbour_labels"][row].tolist() == labels.numpy()[order].tolist()
    assert found["query_labels"].tolist() == labels.numpy()[picks].tolist()
    assert found["query_images"][0].shape == (16, 16, 1) and found["query_images"][0].dtype == np.uint8
