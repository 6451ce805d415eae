"""Candidate pools, neighbour tuples and the neighbour sampler (thesis §3.2) against brute force and hand cases."""
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from xbm.objectives import pool as pool_module
from xbm.objectives.pool import NeighbourSampler, build_pool, tuples

from ..conftest import assert_full_fp32_gemms, needs_cuda

BACKENDS = ["torch", "torch-chunked"] + (["faiss"] if pool_module.faiss is not None else [])


@pytest.fixture(params=BACKENDS)
def backend(request, monkeypatch):
    """Force one search: the torch fallback (faiss hidden), the same in 3-row chunks, or faiss."""
    if request.param.startswith("torch"):
        monkeypatch.setattr(pool_module, "faiss", None)
    if request.param == "torch-chunked":
        monkeypatch.setattr(pool_module, "TORCH_SIMILARITY_ELEMENTS", 3 * 20)  # n = 20 below: 3 rows a chunk
    return request.param


def unit_rows(n, d, seed=0):
    return F.normalize(torch.randn(n, d, generator=torch.Generator().manual_seed(seed)), dim=1)


def brute_force(x, size):
    """float64 inner products, self at -inf, every other row sorted by similarity (descending)."""
    x = x.double().numpy()
    sims = x @ x.T
    np.fill_diagonal(sims, -np.inf)
    order = np.argsort(-sims, axis=1, kind="stable")[:, :size]
    return order, np.take_along_axis(sims, order, axis=1)


def test_pool_matches_brute_force(backend):
    """Bug: a wrong sort direction (least similar first), self left in its own pool, an off-by-one depth,
    or a torch chunk masking the wrong diagonal (chunk offset ignored)."""
    x = unit_rows(20, 8)
    indices, sims = build_pool(x, 5)
    expected_indices, expected_sims = brute_force(x, 5)
    assert indices.dtype == torch.int64 and sims.dtype == torch.float32 and indices.shape == (20, 5)
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_allclose(sims.numpy(), expected_sims, atol=1e-5)


def test_pool_excludes_self_among_duplicates(backend):
    """Bug: with exact duplicates every copy ties with self at similarity 1; a search that asks for size + 1
    and blindly drops the first column either keeps self or loses a copy. Row 0 has three copies (rows 17-19)
    and a pool of 2: its pool must be two of the copies, never itself, for every copy."""
    x = unit_rows(20, 8)
    x[17:] = x[0]
    indices, sims = build_pool(x, 2)
    copies = {0, 17, 18, 19}
    for row in copies:
        assert row not in indices[row].tolist()
        assert set(indices[row].tolist()) <= copies - {row}
        np.testing.assert_allclose(sims[row].numpy(), [1.0, 1.0], atol=1e-5)
    _, expected_sims = brute_force(x, 2)
    np.testing.assert_allclose(sims.numpy(), expected_sims, atol=1e-5)
    recomputed = (x[:, None, :] * x[indices]).sum(-1)  # the listed rows really have the listed similarities
    np.testing.assert_allclose(recomputed.numpy(), sims.numpy(), atol=1e-5)


def test_pool_size_larger_than_the_set(backend):
    """Bug: asking faiss or topk for more neighbours than exist (-1 padding, or an error); the pool must
    hold each other row exactly once."""
    x = unit_rows(20, 8)
    indices, sims = build_pool(x, 250)
    assert indices.shape == sims.shape == (20, 19)
    for row in range(20):
        assert sorted(indices[row].tolist()) == [i for i in range(20) if i != row]
    assert (sims[:, :-1] >= sims[:, 1:]).all()


@pytest.mark.skipif(pool_module.faiss is None, reason="faiss is not installed")
def test_faiss_and_torch_pools_agree(monkeypatch):
    """Bug: the two searches disagree (e.g. faiss fed a non-contiguous array, or torch's fallback not
    excluding self the same way), so a run's pools would depend on whether faiss is installed."""
    x = unit_rows(300, 16, seed=1)
    faiss_indices, faiss_sims = build_pool(x, 25)
    monkeypatch.setattr(pool_module, "faiss", None)
    torch_indices, torch_sims = build_pool(x, 25)
    assert torch.equal(faiss_indices, torch_indices)
    torch.testing.assert_close(faiss_sims, torch_sims, atol=1e-5, rtol=0)


@needs_cuda
def test_pool_stays_on_the_device():
    """Bug: the pool comes back on the CPU (or faiss is handed a CUDA tensor) for CUDA embeddings."""
    x = unit_rows(20, 8)
    indices, sims = build_pool(x.cuda(), 5)
    assert indices.is_cuda and sims.is_cuda
    assert torch.equal(indices.cpu(), build_pool(x, 5)[0])


@pytest.mark.parametrize("embeddings, size, message", [
    (torch.ones(4, 2), 2, "L2-normalised"),
    (unit_rows(4, 2).double(), 2, "fp32"),
    (unit_rows(4, 2)[0], 2, "2-D"),
    (unit_rows(1, 2), 2, "at least 2 rows"),
    (unit_rows(4, 2), 0, "neighbours.pool"),
    (unit_rows(4, 2), True, "neighbours.pool"),
    (unit_rows(4, 2), 2.0, "neighbours.pool"),
    (torch.full((4, 2), float("nan")), 2, "non-finite"),
])
def test_pool_rejects_bad_inputs(embeddings, size, message):
    """Bug: unnormalised rows silently ranked by inner product rather than cosine, or a confusing error."""
    with pytest.raises(ValueError, match=message):
        build_pool(embeddings, size)


# Hand pool: 4 rows, P = 5. Row 0's similarities are not monotone, to check "in pool order".
HAND_INDICES = torch.tensor([[1, 2, 3, 4, 5], [0, 2, 3, 4, 5], [0, 1, 3, 4, 5], [0, 1, 2, 4, 5]])
HAND_SIMS = torch.tensor([[0.9, 0.3, 0.8, 0.7, 0.6],
                          [0.2, 0.1, 0.0, -0.1, -0.2],  # nothing passes
                          [0.5, 0.4, 0.3, 0.2, 0.1],  # exactly at the threshold: passes
                          [0.9, 0.9, 0.9, 0.9, 0.9]])


def test_tuples_respect_threshold_and_fill_with_the_anchor():
    """Bug: members below the threshold admitted, '>' instead of '>=', members taken past the first k
    passing ones, or empty slots filled with pool members (or -1) rather than the anchor itself."""
    members, found = tuples(HAND_INDICES, HAND_SIMS, torch.tensor([0, 1, 2, 3]), k=3, threshold=0.5)
    assert members.tolist() == [[1, 3, 4], [1, 1, 1], [0, 2, 2], [0, 1, 2]]
    assert found.tolist() == [3, 0, 1, 3]


def test_tuples_with_k_beyond_the_pool_and_repeated_anchors():
    """Bug: k > P indexes past the pool; an anchor drawn twice must get the same tuple twice."""
    indices, sims = HAND_INDICES[:, :2], HAND_SIMS[:, :2]
    members, found = tuples(indices, sims, torch.tensor([3, 0, 3]), k=4, threshold=0.5)
    assert members.tolist() == [[0, 1, 3, 3], [1, 0, 0, 0], [0, 1, 3, 3]]
    assert found.tolist() == [2, 1, 2]


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, "neighbours.k"), ({"k": True}, "neighbours.k"), ({"threshold": 1.5}, "threshold"),
    ({"threshold": -1.5}, "threshold"), ({"anchors": torch.tensor([4])}, r"\[0, 4\)"),
    ({"anchors": torch.tensor([0.0])}, "integer row ids"),
])
def test_tuples_reject_bad_inputs(kwargs, message):
    """Bug: an out-of-range anchor wrapping around (negative indexing) or a threshold outside [-1, 1]."""
    arguments = {"anchors": torch.tensor([0]), "k": 3, "threshold": 0.5} | kwargs
    with pytest.raises(ValueError, match=message):
        tuples(HAND_INDICES, HAND_SIMS, **arguments)


def test_the_closed_bounds_are_accepted():
    """Bug: a pool of one member, or a threshold of exactly -1 (take every member) or 1 (only duplicates),
    refused by an off-by-one bound."""
    indices, sims = build_pool(unit_rows(4, 2), 1)
    assert indices.shape == (4, 1)
    for threshold, found in ((-1.0, 3), (1.0, 0)):
        assert tuples(HAND_INDICES, HAND_SIMS, torch.tensor([0]), k=3, threshold=threshold)[1].tolist() == [found]


def test_mismatched_pool_tensors_are_refused():
    """Bug: a pool's indices and similarities of different shapes (or 1-D) silently paired row by row."""
    with pytest.raises(ValueError, match="two \\(n, P\\) tensors of one shape"):
        tuples(HAND_INDICES, HAND_SIMS[:, :3], torch.tensor([0]), k=3, threshold=0.5)
    with pytest.raises(ValueError, match="two \\(n, P\\) tensors of one shape"):
        tuples(HAND_INDICES[0], HAND_SIMS[0], torch.tensor([0]), k=3, threshold=0.5)


def clustered_pool(n=50, seed=0):
    """Embeddings in pairs of near-duplicates: an anchor finds about one neighbour >= 0.95 of its k = 3."""
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(n // 2, 8, generator=generator)
    x = centres[torch.arange(n) // 2] + 0.05 * torch.randn(n, 8, generator=generator)
    return build_pool(F.normalize(x, dim=1), 10)


def test_sampler_yields_whole_tuples_of_distinct_anchors():
    """Bug: a batch split across tuples, an anchor drawn twice in an epoch, members not the anchor's
    tuple, or a length that disagrees with what iteration yields (a DataLoader would then mis-batch)."""
    sampler = NeighbourSampler(50, batch_size=8, k=3, threshold=0.95)
    sampler.pool = clustered_pool()
    np.random.seed(0)
    order = list(iter(sampler))
    assert len(order) == len(sampler) == 48  # floor(50 / 8) = 6 batches of 8
    groups = torch.tensor(order).view(-1, 4)  # 12 tuples of (anchor, 3 members)
    anchors = groups[:, 0]
    assert len(set(anchors.tolist())) == 12
    members, found = tuples(*sampler.pool, anchors, 3, 0.95)
    assert torch.equal(groups[:, 1:], members)
    assert 0 < found.sum() < 36  # the case is mixed: some real neighbours, some self-filled slots
    assert sampler.last_found_fraction == pytest.approx(found.double().mean().item() / 3)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(50)), batch_size=8,
                                         sampler=sampler)
    np.random.seed(0)
    batches = [b[0] for b in loader]
    assert len(batches) == 6 and torch.equal(torch.cat(batches), torch.tensor(order))


def test_sampler_draws_from_numpy_global_rng():
    """Bug: a private or unseeded RNG: the trainer's seed and checkpointed NumPy state would not reproduce
    or resume an epoch. Same seed, same epoch; the next epoch differs."""
    sampler = NeighbourSampler(50, batch_size=8, k=3, threshold=0.95)
    sampler.pool = clustered_pool()
    np.random.seed(7)
    first, second = list(sampler), list(sampler)
    np.random.seed(7)
    assert list(sampler) == first
    assert second != first


def test_found_fraction_by_hand():
    """Bug: the statistic averaged over the wrong axis or not divided by k. Even rows have every
    member at similarity 1, odd rows none above 0: the fraction is the share of even anchors."""
    n = 8
    indices = torch.stack([torch.tensor([j for j in range(n) if j != i]) for i in range(n)])
    sims = torch.zeros(n, n - 1)
    sims[::2] = 1.0
    sampler = NeighbourSampler(n, batch_size=8, k=1, threshold=0.5)
    assert np.isnan(sampler.last_found_fraction)
    sampler.pool = (indices, sims)
    np.random.seed(3)
    anchors = torch.tensor(list(sampler)).view(-1, 2)[:, 0]
    assert sampler.last_found_fraction == pytest.approx((anchors % 2 == 0).double().mean().item())


def test_sampler_bounds():
    """Bug: a threshold of exactly -1 or 1, or a batch of one tuple, refused; a boolean k or batch size, or a
    threshold outside [-1, 1], accepted."""
    for threshold in (-1.0, 1.0):
        NeighbourSampler(8, 4, 3, threshold)
    NeighbourSampler(8, 2, 1, 0.5)
    for args, message in (((8, 4, True, 0.5), "neighbours.k"), ((8, True, 1, 0.5), "batch_size"),
                          ((8, 0, 1, 0.5), "batch_size"), ((8, 4, 3, -1.5), "threshold"), ((8, 4, 3, 1.5), "threshold")):
        with pytest.raises(ValueError, match=message):
            NeighbourSampler(*args)


def test_sampler_rejects_bad_settings():
    """Bug: a batch that cannot hold whole tuples accepted silently; iterating without a pool or with a
    pool of another training set."""
    with pytest.raises(ValueError, match=r"batch_size.*neighbours\.k.*batch_size=10, neighbours.k=3"):
        NeighbourSampler(50, batch_size=10, k=3, threshold=0.95)
    with pytest.raises(ValueError, match="at least one batch"):
        NeighbourSampler(6, batch_size=8, k=3, threshold=0.95)
    sampler = NeighbourSampler(50, batch_size=8, k=3, threshold=0.95)
    with pytest.raises(RuntimeError, match="pool is None"):
        iter(sampler)
    sampler.pool = clustered_pool(n=40)
    with pytest.raises(ValueError, match="40 rows but the training set has 50"):
        iter(sampler)


# Added from the mutation triage (issue 12): whole messages, the path choice, and the edges the cases above miss.
def test_a_pool_of_two_rows_lists_the_other_row(backend):
    """Bug caught (mutation testing): the "at least 2 rows" bound off by one (two rows refused)."""
    indices, sims = build_pool(unit_rows(2, 3), 5)
    assert indices.tolist() == [[1], [0]] and sims.shape == (2, 1)


@pytest.mark.skipif(pool_module.faiss is None, reason="faiss is not installed")
def test_cpu_embeddings_go_to_faiss_and_other_devices_to_the_torch_search(monkeypatch):
    """Bug caught (mutation testing): the device test inverted or misspelt ("CPU"), so CPU pools never use
    faiss (the thesis's tool) and GPU embeddings would be copied to faiss-cpu. "meta" stands in for a GPU."""
    called = []
    monkeypatch.setattr(pool_module, "_faiss_pool", lambda e, depth: called.append(("faiss", depth)))
    monkeypatch.setattr(pool_module, "_torch_pool", lambda e, depth: called.append(("torch", depth)))
    build_pool(unit_rows(4, 2), 2)
    monkeypatch.setattr(pool_module, "_check_pool_rows", lambda e: None)  # meta tensors have no values
    build_pool(torch.empty(4, 2, device="meta"), 9)
    assert called == [("faiss", 2), ("torch", 3)]


def test_self_outranked_by_longer_parallel_rows_drops_the_least_similar(backend):
    """Bug caught (mutation testing): when faiss's depth + 1 results miss self (rows may be 1e-3 off unit
    norm, so a longer parallel row outranks self), the wrong column dropped (the 2nd or the next-to-last, a
    real neighbour) instead of the last. Row 0 has norm 0.9995; rows 1-3 are parallel to it, norms 1.0009,
    1.0007, 1.0005: all three beat row 0's own 0.9990, so its pool of 2 must be rows 1 and 2."""
    x = unit_rows(8, 4)
    x[1:4] = x[0] * torch.tensor([[1.0009], [1.0007], [1.0005]])
    x[0] *= 0.9995
    indices, sims = build_pool(x, 2)
    expected_indices, expected_sims = brute_force(x, 2)
    assert indices[0].tolist() == [1, 2]
    np.testing.assert_array_equal(indices.numpy(), expected_indices)
    np.testing.assert_allclose(sims.numpy(), expected_sims, atol=1e-5)


@pytest.mark.parametrize("embeddings, message", [
    (unit_rows(4, 2)[0], "build_pool needs a 2-D (n, d) tensor of embeddings, but got torch.Size([2])"),
    ([[1.0, 0.0]], "build_pool needs a 2-D (n, d) tensor of embeddings, but got list"),
    (torch.full((4, 2), float("nan")), "build_pool got non-finite embeddings (NaN or inf): the model diverged"),
    (torch.tensor([[1.0, 0.0], [0.1, 0.0], [1.5, 0.0]]), "build_pool needs L2-normalised rows (inner product = "
     "cosine similarity), but a row has norm 0.1: apply F.normalize first"),
    (torch.tensor([[0.5, 0.0], [1.8, 0.0]]), "build_pool needs L2-normalised rows (inner product = cosine "
     "similarity), but a row has norm 1.8: apply F.normalize first"),
])
def test_pool_errors_name_the_offending_input(embeddings, message):
    """Bug caught (mutation testing): the message showing the wrong thing (the type for a tensor, None for
    a list, or a crash building it), or reporting a row other than the one furthest from norm 1 (the
    largest norm, or the one furthest from 2)."""
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        build_pool(embeddings, 2)


def test_tuples_keep_pool_order_in_a_pool_of_more_than_16():
    """Bug caught (mutation testing): the sort on "fails the threshold" not stable. PyTorch's CPU sort is
    stable anyway up to 16 columns, but with the default pool of 250 an unstable one takes passing members
    out of pool order: here 12 of 20 pass, and the first 3 must be pool columns 0-2, not e.g. 1, 2, 3."""
    indices = torch.arange(1, 21)[None, :]
    sims = torch.linspace(0.99, 0.0, 20)[None, :]
    members, found = tuples(indices, sims, torch.tensor([0]), k=3, threshold=0.4)
    assert members.tolist() == [[1, 2, 3]] and found.tolist() == [3]
    sims_mixed = torch.tensor([[0.9, 0.1] * 10])  # passing members at even columns
    members, _ = tuples(indices, sims_mixed, torch.tensor([0]), k=5, threshold=0.5)
    assert members.tolist() == [[1, 3, 5, 7, 9]]


def test_tuples_stay_on_the_pools_device():
    """Bug caught (mutation testing): anchors or the slot range built on the CPU (device dropped or None)
    for a pool on the GPU: members on the wrong device, or a device-mismatch crash. "meta" stands in for a
    GPU (its tensors have no values, hence no anchors); CPU anchors must follow the pool there."""
    pool_indices = torch.empty(4, 5, dtype=torch.long, device="meta")
    members, found = tuples(pool_indices, torch.empty(4, 5, device="meta"), torch.tensor([], dtype=torch.long),
                            3, 0.5)
    assert (members.device.type, found.device.type, tuple(members.shape)) == ("meta", "meta", (0, 3))


def test_sampler_messages_in_full():
    """Bug caught (mutation testing): k = 0 accepted (an `and` for an `or`), a boolean batch size reported
    as an indivisible batch, batch_size = 1 reported as below 1 (it is >= 1, but holds no whole tuple),
    and the message for a missing pool changed."""
    cases = [((8, 4, 0, 0.5), ValueError, "neighbours.k must be an integer >= 1, but got 0"),
             ((8, True, 1, 0.5), ValueError, "batch_size must be an integer >= 1, but got True"),
             ((8, 1, 1, 0.5), ValueError, "a batch holds whole tuples of an anchor and its neighbours.k members: "
              "batch_size % (neighbours.k + 1) == 0 must hold, but got batch_size=1, neighbours.k=1")]
    for args, error, message in cases:
        with pytest.raises(error, match="^" + re.escape(message) + "$"):
            NeighbourSampler(*args)
    with pytest.raises(RuntimeError, match="^" + re.escape(
            "NeighbourSampler.pool is None: set it to build_pool(train embeddings, neighbours.pool) before "
            "iterating an epoch") + "$"):
        iter(NeighbourSampler(8, 4, 1, 0.5))


def test_the_torch_pool_compares_exact_similarities_where_a_cuda_run_allows_tf32(monkeypatch):
    """Bug caught: a CUDA run allows TF32 for fp32 matmuls (``configure_cuda``), and the pool's similarities,
    compared with Eq. 3.6's threshold, were computed in it (~1e-3 off): other pools than on the CPU."""
    monkeypatch.setattr(pool_module, "faiss", None)
    assert_full_fp32_gemms(lambda: build_pool(unit_rows(20, 8), 5))
