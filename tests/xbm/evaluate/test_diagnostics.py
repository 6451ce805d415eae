"""Diagnostics against float64 loops written from their definitions."""
import math

import numpy as np
import pytest
import torch

from xbm.evaluate import diagnostics
from xbm.evaluate.diagnostics import (count_pairs, feature_drift, mean_distances, mean_inter_distance,
                                     mean_intra_distance, memory_staleness, superclass_neighbour_share)

from ..conftest import needs_cuda


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_feature_drift_is_mean_and_max_row_norm():
    previous, current = randn(30, 8, seed=1), randn(30, 8, seed=2)
    norms = [np.linalg.norm(a - b) for a, b in zip(previous.double().numpy(), current.double().numpy())]
    out = feature_drift(previous, current)
    assert out == pytest.approx({"drift_mean": np.mean(norms), "drift_max": np.max(norms)}, rel=1e-5)
    assert all(isinstance(v, float) for v in out.values())


def test_feature_drift_first_epoch_and_unchanged_model():
    x = randn(5, 3)
    assert all(math.isnan(v) for v in feature_drift(None, x).values())
    assert feature_drift(x, x.clone()) == {"drift_mean": 0.0, "drift_max": 0.0}


def test_memory_staleness_accepts_half_precision_and_mixed_devices_of_one_kind():
    stored, current = randn(12, 4, seed=3), randn(12, 4, seed=4)
    expected = np.mean(np.linalg.norm(stored.double().numpy() - current.double().numpy(), axis=1))
    assert memory_staleness(stored, current) == pytest.approx(expected, rel=1e-5)
    assert memory_staleness(stored.half(), current.bfloat16()) == pytest.approx(expected, rel=2e-2)


@pytest.mark.parametrize("fn", [feature_drift, memory_staleness])
def test_row_diagnostics_reject_mismatched_probes(fn):
    with pytest.raises(ValueError, match=r"same samples in the same order.*\(4, 3\) and \(5, 3\)"):
        fn(randn(4, 3), randn(5, 3))


def reference_inter(x, labels=None):
    x = x.double().numpy()
    values = [np.linalg.norm(x[i] - x[j]) for i in range(len(x)) for j in range(len(x))
              if i != j and (labels is None or labels[i] != labels[j])]
    return np.mean(values) if values else math.nan


def test_mean_inter_distance_exact_with_and_without_labels():
    x, y = randn(15, 6, seed=5), torch.tensor([0, 1, 2] * 5)
    assert mean_inter_distance(x) == pytest.approx(reference_inter(x), rel=1e-6)
    assert mean_inter_distance(x, y) == pytest.approx(reference_inter(x, y.tolist()), rel=1e-6)
    assert math.isnan(mean_inter_distance(x, torch.zeros(15)))  # a single class has no inter-class pair
    assert mean_inter_distance(torch.ones(6, 3)) == 0.0  # collapse
    with pytest.raises(ValueError, match="max_pairs must be a positive integer, but got 0"):
        mean_inter_distance(x, max_pairs=0)


def test_mean_inter_distance_sampled_is_seeded_and_close_to_exact():
    x = torch.nn.functional.normalize(randn(400, 16, seed=6), dim=1)
    exact = reference_inter(x[:120])
    sampled = mean_inter_distance(x[:120], max_pairs=5000, seed=3)  # 120 * 119 > 5000: sampled
    assert sampled == mean_inter_distance(x[:120], max_pairs=5000, seed=3)
    assert sampled != mean_inter_distance(x[:120], max_pairs=5000, seed=4)
    assert sampled == pytest.approx(exact, rel=0.01)
    state = torch.get_rng_state()
    mean_inter_distance(x, max_pairs=1000)
    assert torch.equal(state, torch.get_rng_state()), "a diagnostic must not move the global RNG"


def test_mean_distances_gives_both_means_from_the_same_pairs():
    """Bug: the shared pass computes the inter-class mean over other pairs than the ones drawn (or swaps the
    two means). Exact path: the float64 loop; sampled path: a float64 loop over the very pairs the seeded
    generator draws."""
    x, y = randn(15, 6, seed=7), torch.tensor([0, 1, 2, 3, 4] * 3)
    spread, inter = mean_distances(x, y)
    assert (spread, inter) == pytest.approx((reference_inter(x), reference_inter(x, y.tolist())), rel=1e-6)
    assert math.isnan(mean_distances(x)[1])
    for n, dim, pairs, seed in ((90, 5, 3000, 8), (300, 128, 10_000, 9)):
        # 128-d: the CPU's chunks of 2048 gathered pairs split the draw into 5 (a pair lost or summed twice at
        # a chunk's edge would move the means)
        x, y = randn(n, dim, seed=seed), torch.arange(n) % 7
        i, j = torch.randint(0, n, (2, pairs), generator=torch.Generator().manual_seed(seed)).numpy()
        xd, yd = x.double().numpy(), y.numpy()
        d = np.linalg.norm(xd[i] - xd[j], axis=1)
        expected = (d[i != j].mean(), d[yd[i] != yd[j]].mean())
        assert mean_distances(x, y, max_pairs=pairs, seed=seed) == pytest.approx(expected, rel=1e-6)


def test_mean_intra_distance_leaves_singletons_out():
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [5.0, 5.0], [1.0, 1.0], [1.0, 3.0], [1.0, 5.0]])
    y = torch.tensor([7, 7, 9, 3, 3, 3])  # class 9 is a singleton
    # class 7: mean (1, 0), distances 1, 1; class 3: mean (1, 3), distances 2, 0, 2
    assert mean_intra_distance(x, y) == pytest.approx(6 / 5)
    assert math.isnan(mean_intra_distance(x[:3], torch.tensor([0, 1, 2])))


def test_superclass_neighbour_share_leave_one_out_against_a_loop():
    x, y = randn(40, 5, seed=7), torch.arange(40) % 8
    superclass_of = torch.tensor([0, 0, 1, 1, 1, 2, 2, 3])
    d = torch.cdist(x.double(), x.double()).fill_diagonal_(float("inf"))
    expected = np.mean([(superclass_of[y[d[i].argsort()[:3]]] == superclass_of[y[i]]).double().mean()
                        for i in range(40)])
    assert superclass_neighbour_share(x, y, superclass_of, k=3) == pytest.approx(expected)
    assert superclass_neighbour_share(x, y, superclass_of, k=3, knn="torch") == pytest.approx(expected)


def test_superclass_neighbour_share_with_gallery_and_bounds():
    query = torch.tensor([[0.0], [10.0]])
    gallery = torch.tensor([[0.1], [0.2], [9.0], [30.0]])
    superclass_of = [0, 0, 1]
    # query 0 (super 0): neighbours 0.1 (class 1, super 0), 0.2 (class 2, super 1); query 1: 9.0, 0.2
    out = superclass_neighbour_share(query, torch.tensor([0, 2]), superclass_of, k=2, gallery=gallery,
                           gallery_labels=torch.tensor([1, 2, 2, 0]))
    assert out == pytest.approx((0.5 + 1.0) / 2)
    with pytest.raises(ValueError, match=r"class ids in \[0, 3\).*\[0, 5\]"):
        superclass_neighbour_share(query, torch.tensor([0, 5]), superclass_of, gallery=gallery,
                         gallery_labels=torch.tensor([1, 2, 2, 0]))


def test_count_pairs_pairs_triplets_and_all_pairs():
    pairs = (torch.tensor([0, 0, 1, 0]), torch.tensor([1, 2, 2, 1]), torch.tensor([0, 3, 0]), torch.tensor([4, 4, 4]))
    assert count_pairs(pairs) == {"pos_pairs": 3.0, "neg_pairs": 2.0}
    triplets = (torch.tensor([0, 0, 1]), torch.tensor([1, 1, 0]), torch.tensor([2, 3, 2]))
    assert count_pairs(triplets) == {"pos_pairs": 2.0, "neg_pairs": 3.0}
    labels = torch.tensor([0, 0, 1, 1, 1])
    assert count_pairs(None, labels) == {"pos_pairs": 2.0 + 6.0, "neg_pairs": 12.0}
    memory_labels = torch.tensor([0, 1, 1, 2])  # batch rows vs memory columns
    assert count_pairs(None, labels, memory_labels) == {"pos_pairs": 2 + 6.0, "neg_pairs": 20 - 8.0}
    empty = (torch.tensor([], dtype=torch.long),) * 4
    assert count_pairs(empty) == {"pos_pairs": 0.0, "neg_pairs": 0.0}
    with pytest.raises(ValueError, match="needs labels"):
        count_pairs(None)


@needs_cuda
def test_cuda_tensors_match_cpu():
    x, y = randn(64, 8, seed=9), torch.arange(64) % 6
    sup = torch.tensor([0, 0, 1, 1, 2, 2])
    for fn, args in [(feature_drift, (x, x * 0.9)), (mean_inter_distance, (x,)), (mean_intra_distance, (x, y)),
                     (superclass_neighbour_share, (x, y, sup))]:
        cpu = fn(*args)
        gpu = fn(*[a.cuda() for a in args])
        assert gpu == pytest.approx(cpu, rel=1e-4), fn.__name__


def test_public_names():
    assert sorted(diagnostics.__all__) == sorted(["feature_drift", "memory_staleness", "mean_inter_distance",
                                                  "mean_distances",
                                                  "mean_intra_distance", "superclass_neighbour_share",
                                                  "superclass_mean_top_k",
                                                  "count_pairs"])
