"""retrieval_metrics against a brute-force float64 reference written from the definitions."""
import math

import numpy as np
import pytest
import torch

from xbm.evaluate import knn as knn_module
from xbm.evaluate import RetrievalAccuracyCalculator, nearest_neighbours, retrieval_metrics

from .conftest import assert_full_fp32_gemms, needs_cuda

# "torch" runs the symmetric search under leave-one-out; "torch-flat" forces PML's CustomKNN there too.
# "auto-symmetric" lowers the dimension from which "auto" prefers the symmetric search over faiss.
BACKENDS = ["auto", "auto-symmetric", "torch", "torch-flat"] + (["faiss"] if knn_module.faiss is not None else [])


@pytest.fixture(params=BACKENDS)
def knn(request, monkeypatch):
    if request.param == "torch-flat":
        monkeypatch.setattr(knn_module, "SYMMETRIC_STATE_ELEMENTS", 0)
        return "torch"
    if request.param == "auto-symmetric":
        monkeypatch.setattr(knn_module, "SYMMETRIC_MIN_DIM", 1)
        return "auto"
    return request.param


@pytest.mark.parametrize(
    "knn_name, dim, leave_one_out, symmetric",
    [("auto", 384, True, True), ("auto", 8, True, knn_module.faiss is None), ("auto", 384, False, False),
     ("torch", 8, True, True), ("torch", 8, False, False), ("faiss", 384, True, False)],
)
def test_backend_choice(knn_name, dim, leave_one_out, symmetric, monkeypatch):
    if knn_name == "faiss" and knn_module.faiss is None:
        pytest.skip("faiss is not installed")
    calls = []
    real = knn_module._symmetric_neighbours
    monkeypatch.setattr(knn_module, "_symmetric_neighbours", lambda *a: calls.append(1) or real(*a))
    x = torch.randn(12, dim, generator=torch.Generator().manual_seed(0))
    nearest_neighbours(x, 3, None if leave_one_out else x[:5], knn=knn_name)
    assert bool(calls) == symmetric


def reference_metrics(query, query_labels, gallery, gallery_labels, ks, leave_one_out):
    """Definitions, one query at a time: Recall@K (any same-class item in the K nearest), R-precision and
    MAP@R with R = number of same-class gallery items; queries with R = 0 are excluded."""
    q, g = np.asarray(query, np.float64), np.asarray(gallery, np.float64)
    dist = np.sqrt(((q[:, None, :] - g[None, :, :]) ** 2).sum(-1))
    if leave_one_out:
        np.fill_diagonal(dist, np.inf)
    order = np.argsort(dist, axis=1)
    if leave_one_out:
        order = order[:, :-1]  # self, at infinity, is last
    per_query = {f"recall_at_{k}": [] for k in ks} | {"map_at_r": [], "r_precision": []}
    for i, label in enumerate(np.asarray(query_labels)):
        relevant = np.asarray(gallery_labels)[order[i]] == label
        r = int(relevant.sum())
        if r == 0:
            continue
        for k in ks:
            per_query[f"recall_at_{k}"].append(float(relevant[:k].any()))
        per_query["r_precision"].append(relevant[:r].sum() / r)
        precision_at = np.cumsum(relevant[:r]) / np.arange(1, r + 1)
        per_query["map_at_r"].append((precision_at * relevant[:r]).sum() / r)
    return {name: (float(np.mean(v)) if v else math.nan) for name, v in per_query.items()}


def clustered(n, dim, n_classes, seed, noise=0.8):
    """Labelled points around class centres, so that the metrics are neither 0 nor 1."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    centres = rng.normal(size=(n_classes, dim))
    x = centres[labels] + noise * rng.normal(size=(n, dim))
    return torch.tensor(x, dtype=torch.float32), torch.tensor(labels)


def has_near_ties(query, gallery, gallery_labels, ks):
    """Ranks up to max(K, R) + 1 decide the metrics: a gap below fp32 error there could reorder them."""
    depth = max(*ks, int(np.bincount(gallery_labels).max())) + 1
    d = np.sort(torch.cdist(query.double(), gallery.double()).numpy(), axis=1)[:, : depth + 1]
    return np.diff(d, axis=1).min() < 1e-5


def tie_free(ks, n_query, n_gallery, dim, n_classes, seed):
    """(query, labels, gallery, labels) with no near-ties, the first of a deterministic run of seeds;
    n_gallery=None gives leave-one-out data (gallery = query)."""
    for attempt in range(200):
        q, ql = clustered(n_query, dim, n_classes, seed=seed + 1000 * attempt)
        g, gl = (q, ql) if n_gallery is None else clustered(n_gallery, dim, n_classes, seed=seed + 1000 * attempt + 1)
        if not has_near_ties(q, g, gl, ks):
            return q, ql, g, gl
    raise RuntimeError("no tie-free sample found; use fewer points")


def assert_metrics_close(got, expected):
    assert list(got) == list(expected)
    for name, value in expected.items():
        assert isinstance(got[name], float)
        assert got[name] == pytest.approx(value, abs=1e-9, nan_ok=True), name


@pytest.mark.parametrize("ks", [(1, 10), (1, 2, 4, 8), (5,)])
def test_leave_one_out_matches_reference(knn, ks):
    x, y, _, _ = tie_free(ks, 80, None, dim=8, n_classes=12, seed=sum(ks))
    expected = reference_metrics(x, y, x, y, ks, leave_one_out=True)
    assert 0.05 < expected["recall_at_" + str(ks[0])] < 0.95  # a discriminating test case
    assert_metrics_close(retrieval_metrics(x, y, ks=ks, knn=knn), expected)


@pytest.mark.parametrize("ks", [(1, 10), (3, 1, 7)])
def test_query_vs_gallery_matches_reference(knn, ks):
    q, ql, g, gl = tie_free(ks, 40, 70, dim=6, n_classes=12, seed=len(ks))
    g, gl = g[gl != 11], gl[gl != 11]  # class 11 queries have no gallery match: excluded from every metric
    assert (ql == 11).any()
    expected = reference_metrics(q, ql, g, gl, ks, leave_one_out=False)
    assert_metrics_close(retrieval_metrics(q, ql, g, gl, ks=ks, knn=knn), expected)


def test_many_small_blocks_give_the_same_result(knn, monkeypatch):
    """Query blocks of 7, CustomKNN chunks of 3 rows, symmetric tiles of 5 (a partial last one): the self
    index must follow the block offset, and the symmetric search's sparse merges must match."""
    x, y, _, _ = tie_free((1, 3), 64, None, dim=5, n_classes=9, seed=3)
    expected = retrieval_metrics(x, y, ks=(1, 3), knn=knn)
    monkeypatch.setattr(knn_module, "MAX_BLOCK_ROWS", 7)
    monkeypatch.setattr(knn_module, "TORCH_DISTANCE_ELEMENTS", 3 * 64)
    monkeypatch.setattr(knn_module, "SYMMETRIC_BLOCK", 5)
    assert_metrics_close(retrieval_metrics(x, y, ks=(1, 3), knn=knn), expected)
    assert_metrics_close(expected, reference_metrics(x, y, x, y, (1, 3), leave_one_out=True))


@pytest.mark.parametrize("k", [1, 4, 38, 39, 100])
def test_nearest_neighbours_are_the_brute_force_order(knn, k, monkeypatch):
    """Indices themselves, leave-one-out and against a gallery, up to every other row (k >= 39)."""
    monkeypatch.setattr(knn_module, "SYMMETRIC_BLOCK", 8)  # several tiles, dense then sparse merges
    x, _, _, _ = tie_free((39,), 40, None, dim=4, n_classes=1, seed=k)
    g = next(g for g, _ in (clustered(25, 4, 1, seed=k + 1 + 1000 * i) for i in range(100))
             if not has_near_ties(x, g, torch.zeros(25, dtype=torch.long), (25,)))
    d = torch.cdist(x.double(), x.double()).fill_diagonal_(float("inf"))
    expected = d.argsort(dim=1)[:, : min(k, 39)]
    assert torch.equal(nearest_neighbours(x, k, knn=knn), expected)
    expected = torch.cdist(x.double(), g.double()).argsort(dim=1)[:, : min(k, 25)]
    assert torch.equal(nearest_neighbours(x, k, g, knn=knn), expected)


def test_singletons_are_excluded_under_leave_one_out():
    x = torch.tensor([[0.0, 0.0], [0.1, 0.0], [5.0, 0.0], [0.05, 0.3]])
    y = torch.tensor([0, 1, 0, 2])  # 1 and 2 are singletons; 0 has two far-apart members
    out = retrieval_metrics(x, y, ks=(1, 2, 3))
    # Only the two class-0 queries count; each finds the other only at rank 3.
    assert out == {"recall_at_1": 0.0, "recall_at_2": 0.0, "recall_at_3": 1.0, "map_at_r": 0.0,
                   "r_precision": 0.0}


def test_no_valid_query_gives_nan():
    out = retrieval_metrics(torch.eye(3), torch.tensor([0, 1, 2]))
    assert all(math.isnan(v) for v in out.values())


def test_k_beyond_gallery_size_counts_the_whole_gallery():
    q, ql = clustered(10, 4, 3, seed=5)
    g, gl = clustered(6, 4, 3, seed=6)[0], torch.tensor([0, 1, 2, 0, 1, 2])
    out = retrieval_metrics(q, ql, g, gl, ks=(100,))
    assert out["recall_at_100"] == 1.0
    assert_metrics_close(out, reference_metrics(q, ql, g, gl, (100,), leave_one_out=False))


def test_exact_duplicates_never_retrieve_themselves():
    """Rows 0 and 1 coincide (a tie with self at distance 0) but differ in class, so a query that
    retrieved itself instead of its twin would score a hit it does not deserve."""
    x = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.4, 0.0], [-0.6, 0.0]])
    y = torch.tensor([0, 1, 0, 1])
    # Top-2 without self: row 0 -> {1, 2} hit; row 1 -> {0, 2} miss; rows 2 and 3 -> {0, 1} hit.
    assert retrieval_metrics(x, y, ks=(2,))["recall_at_2"] == 0.75


def test_large_integer_labels_stay_distinct():
    """2**30 and 2**30 + 1 are equal in float32, the dtype PML casts labels to."""
    x = torch.tensor([[0.0], [0.1], [1.0], [1.1]])
    y = torch.tensor([2**30, 2**30 + 1, 2**30, 2**30 + 1])
    assert retrieval_metrics(x, y, ks=(1,))["recall_at_1"] == 0.0


def test_numpy_and_half_precision_inputs():
    x, y = clustered(40, 4, 5, seed=7)
    expected = retrieval_metrics(x, y)
    assert_metrics_close(retrieval_metrics(x.numpy(), y.numpy()), expected)
    # fp16 rows are evaluated as their exact fp32 values (not rounded further, not compared in fp16).
    # Bug caught: half inputs searched in half precision (ties and overflow change the neighbours).
    assert_metrics_close(retrieval_metrics(x.half(), y), retrieval_metrics(x.half().float(), y))
    assert_metrics_close(retrieval_metrics(x.clone().requires_grad_(), y), expected)  # no autograd graph


@needs_cuda
def test_cuda_tensors_match_cpu():
    x, y = clustered(300, 16, 20, seed=8)
    assert_metrics_close(retrieval_metrics(x.cuda(), y.cuda()), retrieval_metrics(x, y))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(gallery=torch.zeros(3, 2)), "given together"),
        (dict(ks=(0, 1)), "distinct positive integers"),
        (dict(ks=(1, 1)), "distinct positive integers"),
        (dict(ks=(1.5,)), "distinct positive integers"),
        (dict(gallery=torch.zeros(3, 5), gallery_labels=torch.zeros(3)), "same embedding size"),
        (dict(gallery=torch.zeros(3, 2), gallery_labels=torch.zeros(4)), r"gallery_labels must have shape \(3,\)"),
        (dict(knn="annoy"), r"knn must be one of \['auto', 'faiss', 'torch'\]"),
    ],
)
def test_invalid_arguments_say_what_is_wrong(kwargs, message):
    with pytest.raises(ValueError, match=message):
        retrieval_metrics(torch.zeros(4, 2), torch.tensor([0, 0, 1, 1]), **kwargs)


@pytest.mark.parametrize("leave_one_out", [True, False])
def test_superclass_neighbour_share_from_the_same_search_matches_the_diagnostic(leave_one_out):
    from xbm.evaluate.diagnostics import superclass_neighbour_share

    q, ql = clustered(60, 6, 10, seed=11)
    g, gl = (None, None) if leave_one_out else clustered(45, 6, 10, seed=12)
    superclass_of = torch.tensor([0, 0, 0, 1, 1, 2, 2, 2, 3, 3])
    out = retrieval_metrics(q, ql, g, gl, ks=(1,), superclass_of=superclass_of, superclass_k=15)
    expected = superclass_neighbour_share(q, ql, superclass_of, k=15, gallery=g, gallery_labels=gl)
    assert out["superclass_neighbour_share"] == pytest.approx(expected, abs=1e-12)
    assert_metrics_close({k: v for k, v in out.items() if k != "superclass_neighbour_share"},
                         retrieval_metrics(q, ql, g, gl, ks=(1,)))
    with pytest.raises(ValueError, match=r"query_labels must be integer class ids in \[0, 3\)"):
        retrieval_metrics(q, ql, g, gl, superclass_of=superclass_of[:3])


@pytest.mark.parametrize("leave_one_out", [True, False])
def test_calculator_also_works_through_pml_get_accuracy(leave_one_out):
    """RetrievalAccuracyCalculator is a complete PML calculator: its own get_accuracy (one k-NN for all
    queries) agrees with the blocked retrieval_metrics, Recall@K with K above the largest class included."""
    q, ql = clustered(50, 6, 10, seed=13)
    g, gl = (None, None) if leave_one_out else clustered(70, 6, 10, seed=14)
    got = RetrievalAccuracyCalculator((1, 12), device=torch.device("cpu")).get_accuracy(q, ql, g, gl)
    expected = retrieval_metrics(q, ql, g, gl, ks=(1, 12))
    renamed = {"map_at_r": "mean_average_precision_at_r", "r_precision": "r_precision"}
    assert got == pytest.approx({renamed.get(k, k): v for k, v in expected.items()}, abs=1e-9)


def test_nearest_neighbours_rejects_bad_k():
    with pytest.raises(ValueError, match="k must be a positive integer, but got 0"):
        nearest_neighbours(torch.zeros(3, 2), 0)


def test_invalid_embeddings_say_what_is_wrong():
    with pytest.raises(ValueError, match="2 of 4 rows contain NaN"):
        retrieval_metrics(torch.tensor([[0.0, 1.0], [float("nan"), 1.0], [1.0, float("-inf")], [1.0, 2.0]]),
                          torch.tensor([0, 0, 1, 1]))
    # Finite, though each row's sum overflows: accepted (bug caught: a finiteness check on row sums that
    # rejects valid rows). Its values are not checked: squared distances of such rows overflow fp32, so no
    # fp32 search ranks them correctly (embeddings are L2-normalised in training).
    huge = torch.tensor([[3e38, 3e38], [3e38, 3e38], [0.0, 0.0]])
    assert set(retrieval_metrics(huge, torch.tensor([0, 0, 1]), ks=(1,))) == {"recall_at_1", "map_at_r",
                                                                             "r_precision"}
    with pytest.raises(ValueError, match="at least 2 queries"):
        retrieval_metrics(torch.zeros(1, 3), torch.tensor([0]))
    with pytest.raises(ValueError, match=r"query_labels must have shape \(2,\)"):
        retrieval_metrics(torch.zeros(2, 3), torch.tensor([0, 1, 2]))


@pytest.mark.parametrize("ks", [(1, 10, 20, 30, 40, 50), (1, 10, 100)])
@pytest.mark.parametrize("leave_one_out", [False, True])
def test_recall_at_k_beyond_10_equals_a_brute_force_count(knn, ks, leave_one_out):
    """Bug caught: Recall@K wrong for the papers' large K (In-Shop's 20-50, SOP's 100): the search cut at a
    depth below K (R or 10), or K counted from 0, against a brute-force count over the full distance matrix.
    The data are chosen so that every K gives a value strictly between 0 and 1 and the values differ."""
    q, ql, g, gl = tie_free(ks, 160 if leave_one_out else 60, None if leave_one_out else 400, dim=4, n_classes=60,
                            seed=len(ks))
    expected = reference_metrics(q, ql, g, gl, ks, leave_one_out=leave_one_out)
    recalls = [expected[f"recall_at_{k}"] for k in ks[1:]]
    assert all(0.0 < r < 1.0 for r in recalls) and len(set(recalls)) == len(recalls)
    got = retrieval_metrics(q, ql, *((None, None) if leave_one_out else (g, gl)), ks=ks, knn=knn)
    assert_metrics_close(got, expected)


@pytest.mark.parametrize("gallery", [False, True])
def test_the_torch_search_computes_exact_distances_where_a_cuda_run_allows_tf32(gallery):
    """Bug caught: a CUDA run allows TF32 for fp32 matmuls (``configure_cuda``), and the neighbour search's
    distances (|x|^2 + |y|^2 - 2 x.y, which cancels) were computed in it, ~1e-3 off: enough to reorder near
    neighbours, so Recall@K on a GPU differed from the same embeddings' on the CPU. Both torch searches:
    the symmetric leave-one-out one and PML's CustomKNN against a gallery."""
    x = torch.nn.functional.normalize(torch.randn(30, 8, generator=torch.Generator().manual_seed(0)), dim=1)
    assert_full_fp32_gemms(lambda: list(knn_module.iter_neighbours(x, 3, x[:12] if gallery else None, knn="torch")))
