"""Training diagnostics as plain floats: feature drift, memory staleness, embedding spread, super-class
neighbourhoods and mined pair counts (names of the metrics they feed: docs/ARCHITECTURE.md).

Pure functions of tensors: no model, no config, no global RNG (sampling uses its own seeded generator, so
that calling a diagnostic never changes a training run). They accept CPU or CUDA tensors in any float dtype,
compute in fp32 on the embeddings' device, and chunk whatever grows with N^2. Distances are Euclidean
(``||a - b||_2``), the distance of ``xbm.evaluate``.
"""
from __future__ import annotations

import math

import torch
from pytorch_metric_learning.utils import loss_and_miner_utils as lmu

from xbm.evaluate import nearest_neighbours
from xbm.evaluate.metrics import superclass_ids

_CHUNK_ELEMENTS = 2**22  # floats per chunk of pairwise work (16 MiB in fp32)
# Sampled pairs on the CPU: gathered rows in chunks of 1 MiB, which stay in cache (2 cores, 480 x 128-d rows,
# 100k pairs: 14 ms against 72 ms in 16-MiB chunks); a GPU takes the large chunks (fewer launches).
_CPU_PAIR_CHUNK_ELEMENTS = 2**18


def feature_drift(previous, current) -> dict[str, float]:
    """How far the embeddings of a fixed probe set moved in one epoch: ``drift_mean``, ``drift_max``.

    drift_i = ||f(x_i; theta_k) - f(x_i; theta_{k-1})||_2 for the probe samples x_i (same rows, same order in
    both), reported as the mean and the max over i. This is the feature drift of the XBM paper (Wang et al.
    2020, Sec. 3.2 and Fig. 3, which plot the squared norm at gaps of 10, 100 and 1000 iterations) measured
    between consecutive epochs, as seed 000 Sec. 5.4 does: slow drift is what makes stored memory rows usable
    as negatives.
    ``previous=None`` (the first epoch) gives NaN for both.
    """
    if previous is None:
        return {"drift_mean": math.nan, "drift_max": math.nan}
    distances = _row_distances("previous", previous, "current", current)
    return {"drift_mean": float(distances.mean()), "drift_max": float(distances.max())}


def memory_staleness(stored, current) -> float:
    """``staleness_mean``: mean ||m_i - f(x_i; theta_now)||_2 over memory rows m_i and the current model's
    embedding of the same training samples x_i (seed 001 Appendix C).

    A memory row was written when its sample was last in a batch, by an older model; staleness is how far
    that stored feature is from what the model computes now, i.e. the error the memory brings into the loss.
    """
    return float(_row_distances("stored", stored, "current", current).mean())


def mean_inter_distance(embeddings, labels=None, *, max_pairs: int = 100_000, seed: int = 0) -> float:
    """``inter_distance_mean``: mean ||z_i - z_j||_2 over pairs i != j (of different classes when ``labels``
    is given): the spread of the embedding space. A collapse (every z alike) drives it to 0; on the unit
    sphere it is at most 2, and sqrt(2) ~ 1.41 for uniformly spread points in high dimension.

    Exact over every ordered pair when N (N - 1) <= ``max_pairs``; otherwise the mean of ``max_pairs``
    pairs drawn uniformly with a generator seeded by ``seed`` (relative standard error ~ 1/sqrt(max_pairs)
    of the distances' spread). NaN when no pair qualifies. :func:`mean_distances` gives both means at once.
    """
    spread, inter = mean_distances(embeddings, labels, max_pairs=max_pairs, seed=seed)
    return spread if labels is None else inter


def mean_distances(embeddings, labels=None, *, max_pairs: int = 100_000,
                   seed: int = 0) -> tuple[float, float]:
    """``(embedding_spread, inter_distance_mean)``: :func:`mean_inter_distance` without and with ``labels``
    (NaN for the second without labels), from one computation of the distances: the same pairs, so an
    evaluation that reports both pays for one."""
    if isinstance(max_pairs, bool) or not isinstance(max_pairs, int) or max_pairs < 1:
        raise ValueError(f"max_pairs must be a positive integer, but got {max_pairs!r}")
    x = _embeddings("embeddings", embeddings)
    y = None if labels is None else _labels(labels, x)
    n = len(x)
    totals, counts = [0.0, 0.0], [0, 0]  # every pair i != j; pairs of different classes

    def add(d: torch.Tensor, other: torch.Tensor | None, different: torch.Tensor | None) -> None:
        """Distances ``d`` of a chunk; ``other``: its pairs i != j (None: all are)."""
        totals[0] += float((d if other is None else d[other]).double().sum())
        counts[0] += len(d) if other is None else int(other.sum())
        if different is not None:
            totals[1] += float(d[different].double().sum())
            counts[1] += int(different.sum())

    if n * (n - 1) <= max_pairs:
        rows = max(1, _CHUNK_ELEMENTS // n)
        for start in range(0, n, rows):
            # cdist without the |a|^2 + |b|^2 - 2ab shortcut: exact for the tiny distances of a collapse.
            d = torch.cdist(x[start: start + rows], x, compute_mode="donot_use_mm_for_euclid_dist")
            own = torch.arange(start, min(start + rows, n), device=x.device)
            other = own[:, None] != torch.arange(n, device=x.device)[None, :]
            add(d, other, None if y is None else other & (y[start: start + rows, None] != y[None, :]))
    else:
        generator = torch.Generator().manual_seed(seed)  # CPU draws: the same pairs on every device
        i, j = torch.randint(0, n, (2, max_pairs), generator=generator).to(x.device)
        other = i != j
        i, j = i[other], j[other]
        step = max(1, (_CHUNK_ELEMENTS if x.is_cuda else _CPU_PAIR_CHUNK_ELEMENTS) // x.shape[1])
        for s in range(0, len(i), step):
            a, b = i[s: s + step], j[s: s + step]
            d = (x[a] - x[b]).norm(dim=1)
            add(d, None, None if y is None else y[a] != y[b])
    return tuple(total / count if count else math.nan for total, count in zip(totals, counts))


def mean_intra_distance(embeddings, labels) -> float:
    """``intra_distance_mean``: mean ||z_i - mu_{y_i}||_2, with mu_c the mean embedding of class c (not
    re-normalised): how tight the classes are. Classes with one sample (distance 0 by construction) are
    left out; NaN when no class has two samples. Read with ``mean_inter_distance``: their ratio is
    scale-free."""
    x = _embeddings("embeddings", embeddings)
    _, ids = torch.unique(_labels(labels, x), return_inverse=True)
    counts = torch.bincount(ids)
    # Class sums on the CPU: CUDA's index_add_ adds with atomics in no fixed order, so on a GPU the metric
    # would change in its last digits between identical runs (and a resumed run would not repeat it).
    sums = torch.zeros(len(counts), x.shape[1], dtype=torch.float64).index_add_(0, ids.cpu(), x.cpu().double())
    means = (sums / counts.cpu()[:, None]).to(x)
    keep = counts[ids] > 1
    if not bool(keep.any()):
        return math.nan
    return float((x[keep] - means[ids[keep]]).norm(dim=1).double().mean())


def superclass_neighbour_share(embeddings, labels, superclass_of, k: int = 10, *, gallery=None,
                               gallery_labels=None, knn: str = "auto") -> float:
    """``superclass_neighbour_share``: the proportion of each query's k nearest neighbours that share its
    super-class, averaged over queries. Not the thesis's Table 5.16 measure (that is
    :func:`superclass_mean_top_k`, nearest super-class means); neighbours of the query's own class count,
    so the value is at least the precision@k of the classes; the excess over it shows whether the wrong
    neighbours are at least semantically close (e.g. another bicycle in SOP, another letter of the alphabet).

    superclass_of: (C,) tensor (or sequence), ``superclass_of[c]`` = super-class of class id ``c`` (the
    ``DatasetSplits.superclass_of`` of ``xbm.data``). Without a gallery, leave-one-out on ``embeddings``;
    with one, neighbours come from ``gallery``. Fewer than k candidates: all of them are used.
    ``retrieval_metrics(..., superclass_of=...)`` returns the same value from its own search, saving one.
    """
    query = _embeddings("embeddings", embeddings)
    query_labels = _labels(labels, query)
    if (gallery is None) != (gallery_labels is None):
        raise ValueError("gallery and gallery_labels must be given together (or both None for leave-one-out)")
    if gallery is not None:
        gallery = _embeddings("gallery", gallery).to(query.device)
        gallery_labels = _labels(gallery_labels, gallery)
    query_super = superclass_ids(superclass_of, query_labels, "labels")
    gallery_super = query_super if gallery is None else superclass_ids(superclass_of, gallery_labels, "gallery_labels")
    neighbours = nearest_neighbours(query, k, gallery, knn=knn)
    same = gallery_super[neighbours] == query_super[:, None]
    return float(same.double().mean())


def superclass_mean_top_k(embeddings, labels, superclass_of, ks=(1, 2, 3, 4, 5), *, gallery=None,
                          gallery_labels=None) -> dict[str, float]:
    """``superclass_top_<k>`` for each k of ``ks``: the share of queries whose true super-class is among the k
    super-class means nearest to them (seed 000 Table 5.16, "proportion of embeddings whose superclass is in
    their top k nearest superclass means"; Euclidean distance).

    The means mu_s are those of the reference embeddings of each super-class s (``gallery`` when given, else
    ``embeddings`` themselves, queries included, as the thesis's whole-split means), not re-normalised; only
    super-classes present among the references have a mean. A query whose super-class has no mean never
    counts as a hit. k beyond the number of means takes every mean.
    """
    query = _embeddings("embeddings", embeddings)
    query_super = superclass_ids(superclass_of, _labels(labels, query), "labels")
    if (gallery is None) != (gallery_labels is None):
        raise ValueError("gallery and gallery_labels must be given together (or both None for the query set)")
    refs, ref_super = query, query_super
    if gallery is not None:
        refs = _embeddings("gallery", gallery).to(query.device)
        ref_super = superclass_ids(superclass_of, _labels(gallery_labels, refs), "gallery_labels")
    supers, ids = torch.unique(ref_super, return_inverse=True)
    # Sums on the CPU in float64: CUDA's index_add_ adds in no fixed order (see mean_intra_distance).
    sums = torch.zeros(len(supers), refs.shape[1], dtype=torch.float64).index_add_(0, ids.cpu(), refs.cpu().double())
    means = (sums / torch.bincount(ids.cpu(), minlength=len(supers))[:, None]).to(query)
    # rank of the query's own super-class mean: how many means are strictly nearer (ties count for the query)
    d = torch.cdist(query, means, compute_mode="donot_use_mm_for_euclid_dist")
    own = query_super[:, None] == supers[None, :]
    own_distance = torch.where(own, d, torch.inf).min(dim=1).values
    rank = (d < own_distance[:, None]).sum(dim=1)
    has_mean = own.any(dim=1)
    return {f"superclass_top_{k}": float((has_mean & (rank < k)).double().mean()) for k in ks}


def count_pairs(indices_tuple, labels=None, ref_labels=None) -> dict[str, float]:
    """Distinct positive and negative pairs in a PML indices tuple: ``{"pos_pairs": ..., "neg_pairs": ...}``.

    indices_tuple: a miner's output, pairs (a1, p, a2, n) or triplets (a, p, n), indices into the
    embeddings (rows) and the reference embeddings (columns, e.g. the memory); or None, PML's "every pair",
    which needs ``labels`` (and ``ref_labels`` when the reference set differs). Triplets sharing an
    anchor-positive pair count that pair once. Averaged over iterations these give the valid negative pairs
    per iteration from the memory vs the batch (seed 000 Sec. 5.4).
    """
    if indices_tuple is None and labels is None:
        raise ValueError("count_pairs(None, ...) means every pair and needs labels (and ref_labels for a "
                         "separate reference set), but got labels=None")
    if indices_tuple is not None and len(indices_tuple) not in (3, 4):
        raise ValueError(f"indices_tuple must be pairs (a1, p, a2, n) or triplets (a, p, n), but got "
                         f"{len(indices_tuple)} tensors")
    a1, p, a2, n = lmu.convert_to_pairs(indices_tuple, labels, ref_labels)
    return {"pos_pairs": float(_distinct_pairs(a1, p)), "neg_pairs": float(_distinct_pairs(a2, n))}


def _distinct_pairs(rows: torch.Tensor, cols: torch.Tensor) -> int:
    if len(rows) == 0:
        return 0
    return len(torch.unique(rows.long() * (int(cols.max()) + 1) + cols.long()))


def _row_distances(name_a: str, a, name_b: str, b) -> torch.Tensor:
    """||a_i - b_i||_2 per row, in fp32 on b's device."""
    b = _embeddings(name_b, b)
    a = _embeddings(name_a, a).to(b.device)
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} must hold the same samples in the same order (equal shapes), "
                         f"but got {tuple(a.shape)} and {tuple(b.shape)}")
    return (a - b).norm(dim=1)


def _embeddings(name: str, x) -> torch.Tensor:
    x = torch.as_tensor(x)
    if x.ndim != 2 or len(x) == 0:
        raise ValueError(f"{name} must be a non-empty (N, D) matrix, but got shape {tuple(x.shape)}")
    return x.detach().float()


def _labels(labels, x: torch.Tensor) -> torch.Tensor:
    y = torch.as_tensor(labels, device=x.device)
    if y.shape != (len(x),):
        raise ValueError(f"labels must have shape ({len(x)},) to match the embeddings, but got {tuple(y.shape)}")
    return y


__all__ = ["feature_drift", "memory_staleness", "mean_inter_distance", "mean_distances",
           "mean_intra_distance", "superclass_neighbour_share", "superclass_mean_top_k", "count_pairs"]
