"""Retrieval evaluation: Recall@K, MAP@R and R-precision of embeddings, chunked so that large galleries fit.

Distance: Euclidean, d(q, g) = ||q - g||_2, on the embeddings exactly as given (nothing is normalised here).
On L2-normalised embeddings this ranks neighbours exactly as cosine similarity does, since
||q - g||^2 = 2 - 2 cos(q, g); on off-sphere embeddings the norms count, as they do for an Lp miner.

Metrics (``ks`` gives the K of Recall@K):

- Recall@K (seed 000 Def. 3, the standard metric-learning Recall@K of Song et al. 2016 / Wang et al.
  2020): the fraction of queries with at least one item of their own class among their K nearest
  gallery items, ``mean_q 1[exists i <= K: y(n_i(q)) = y(q)]``.
- MAP@R and R-precision (Musgrave et al. 2020, "A Metric Learning Reality Check", Sec. 3.2), computed by
  pytorch-metric-learning's ``AccuracyCalculator``: with R = the number of gallery items of the query's
  class, ``R-precision = |relevant among top R| / R`` and ``MAP@R = 1/R sum_{i<=R} P(i) 1[i-th is relevant]``.

Queries without any other same-class item in the gallery ("lone" queries, e.g. singleton classes under
leave-one-out) are excluded from every metric, Recall@K included: PML's convention, and the only one under
which Recall@K cannot be lowered by the data split alone. A metric over zero valid queries is NaN.

The exact k-NN search (``xbm.evaluate.knn``) yields blocks of queries, never an N x M matrix: faiss
``IndexFlatL2`` or PML's ``CustomKNN`` for a separate gallery, a symmetric torch search (half the work of a
flat search) for leave-one-out. Metrics are computed per block and averaged over the valid queries.
"""
from __future__ import annotations

import functools
import math
import numbers
import warnings
from typing import Callable, Iterable

import torch
from pytorch_metric_learning.distances import LpDistance
from pytorch_metric_learning.utils import accuracy_calculator as pml_acc
from pytorch_metric_learning.utils.inference import CustomKNN, FaissKNN

from xbm.evaluate import knn as knn_search
from xbm.evaluate.kmeans import kmeans_for

_PML_METRICS = {"map_at_r": "mean_average_precision_at_r", "r_precision": "r_precision"}


class RetrievalAccuracyCalculator(pml_acc.AccuracyCalculator):
    """PML's ``AccuracyCalculator`` with ``recall_at_<k>`` added for each k in ``ks`` (PML docs, "Adding
    custom accuracies": a ``calculate_<name>`` method plus its name in ``requires_knn``).

    ``accuracy_from_knn`` evaluates one block of queries from its k-NN labels, so that a caller can
    search block by block and never hold the whole query x k table (see ``retrieval_metrics``).
    """

    def __init__(self, ks: Iterable[int], knn_func: Callable | None = None, device: torch.device | None = None):
        self.ks = tuple(ks)
        # AccuracyCalculator discovers metrics through dir(self), which lists these instance attributes.
        for k in self.ks:
            setattr(self, f"calculate_recall_at_{k}", functools.partial(self._recall_at, k=k))
        include = (*_PML_METRICS.values(), *self.recall_names())
        super().__init__(include=include, k="max_bin_count", knn_func=knn_func or default_knn(), device=device)

    def determine_k(self, bin_counts, num_reference_embeddings, ref_includes_query):
        """PML searches max-bin-count neighbours (R, for MAP@R); Recall@K needs at least max K of them."""
        k = super().determine_k(bin_counts, num_reference_embeddings, ref_includes_query)
        return min(max(k, max(self.ks)), num_reference_embeddings - int(ref_includes_query))

    def recall_names(self) -> list[str]:
        return [f"recall_at_{k}" for k in self.ks]

    def requires_knn(self) -> list[str]:
        return [*super().requires_knn(), *self.recall_names()]

    def _recall_at(self, knn_labels, query_labels, not_lone_query_mask, label_counts, k, **kwargs):
        """Recall@k: 1 for a query with a same-class item among its k nearest, else 0; lone queries dropped."""
        knn_labels, query_labels = pml_acc.try_getting_not_lone_labels(knn_labels, query_labels, not_lone_query_mask)
        if knn_labels is None:
            return pml_acc.nan_accuracy(label_counts[0], self.return_per_class)
        hit = self.label_comparison_fn(query_labels[:, None], knn_labels[:, :k]).any(dim=1)
        return pml_acc.maybe_get_avg_of_avgs(hit.double(), query_labels, self.avg_of_avgs, self.return_per_class)

    def accuracy_from_knn(self, knn_labels, query_labels, label_counts, ref_includes_query):
        """Metrics of one block: (dict PML name -> mean over its valid queries, number of valid queries).

        label_counts: (unique labels of the block, number of gallery items of each), PML's format.
        """
        _, not_lone = pml_acc.get_lone_query_labels(
            query_labels, label_counts, ref_includes_query, self.label_comparison_fn
        )
        n_valid = int(not_lone.sum())
        if n_valid == 0:
            return {}, 0
        # Drop lone queries here, once: PML's per-metric filter tests its mask with Python's any(), which
        # walks the tensor element by element until the first True.
        kwargs = dict(
            knn_labels=knn_labels[not_lone], query_labels=query_labels[not_lone], label_counts=label_counts,
            not_lone_query_mask=torch.ones(n_valid, dtype=torch.bool, device=not_lone.device),
            ref_includes_query=ref_includes_query,
            label_comparison_fn=self.label_comparison_fn,
        )
        return self._get_accuracy(self.curr_function_dict, **kwargs), n_valid


def retrieval_metrics(query, query_labels, gallery=None, gallery_labels=None, ks=(1, 10), *,
                      knn: str = "auto", superclass_of=None, superclass_k: int = 10) -> dict[str, float]:
    """Recall@K for each K in ``ks``, MAP@R and R-precision of ``query`` against ``gallery``.

    Args:
        query: (N, D) embeddings (torch tensor, CPU or CUDA, or array); any float dtype, searched in fp32.
        query_labels: (N,) class labels (integers or floats, any values).
        gallery, gallery_labels: (M, D) and (M,); both None means leave-one-out retrieval on the query
            set: every query searches all the other queries, never itself.
        ks: the K of Recall@K, positive integers. K beyond the gallery size counts the whole gallery.
        knn: the k-NN backend, "auto", "faiss" or "torch" (see ``xbm.evaluate.knn``); all find the same
            neighbours up to ties, "auto" the fastest way.
        superclass_of: optional (C,) super-class of each class id (labels must then be ids in [0, C)):
            adds ``superclass_neighbour_share``, the share of each query's ``superclass_k`` nearest neighbours
            in its super-class, averaged over all queries, from the same search
            (``xbm.evaluate.diagnostics.superclass_neighbour_share`` computes it with a search of its own).

    Returns:
        ``{"recall_at_<k>": ..., "map_at_r": ..., "r_precision": ...}`` as floats in [0, 1], averaged over
        the queries that have at least one other same-class item in the gallery (see the module docstring);
        NaN when there is none. Plus ``superclass_neighbour_share`` when ``superclass_of`` is given.
    """
    ks, leave_one_out = _check_ks(ks), gallery is None and gallery_labels is None
    query, query_labels, gallery, gallery_labels = _checked_sets(query, query_labels, gallery, gallery_labels)

    # Contiguous class ids: int64 comparisons stay exact (PML would cast labels to float32) and
    # gallery counts per class become one bincount.
    classes, ids = torch.unique(torch.cat([query_labels, gallery_labels]), return_inverse=True)
    query_ids, gallery_ids = ids[: len(query)], ids[len(query):]
    gallery_count = torch.bincount(gallery_ids, minlength=len(classes))

    # Depth of the search: max K, and R (the largest class) for MAP@R and R-precision.
    available = len(gallery) - int(leave_one_out)
    depth = min(max(max(ks), int(gallery_count[query_ids].max()) - int(leave_one_out)), available)
    if superclass_of is not None:
        query_super, gallery_super = _superclasses(superclass_of, superclass_k, query_labels, gallery_labels)
        depth = max(depth, min(int(superclass_k), available))  # extra columns: PML's metrics stop at R
        same_super_sum = 0.0
    calc = RetrievalAccuracyCalculator(ks, device=query.device)
    sums = {name: 0.0 for name in calc.get_curr_metrics()}
    n_valid = 0
    for start, indices in knn_search.iter_neighbours(query, depth, None if leave_one_out else gallery, knn=knn):
        block_ids = query_ids[start: start + len(indices)]
        knn_labels, block_labels, label_counts = _relabel_by_class_size(
            gallery_ids[indices], block_ids, gallery_count[block_ids])
        values, valid = calc.accuracy_from_knn(knn_labels, block_labels, label_counts, leave_one_out)
        for name, value in values.items():
            sums[name] += value * valid  # PML returns the block's mean: weigh it back into a sum
        n_valid += valid
        if superclass_of is not None:
            same = gallery_super[indices[:, :superclass_k]] == query_super[start: start + len(indices), None]
            same_super_sum += float(same.double().mean(dim=1).sum())

    mean = {name: (total / n_valid if n_valid else math.nan) for name, total in sums.items()}
    out = {name: float(mean[name]) for name in calc.recall_names()}
    out.update({ours: float(mean[pml]) for ours, pml in _PML_METRICS.items()})
    if superclass_of is not None:
        out["superclass_neighbour_share"] = same_super_sum / len(query)
    return out


def _superclasses(superclass_of, superclass_k, query_labels, gallery_labels) -> tuple[torch.Tensor, torch.Tensor]:
    """The super-class id of each query and gallery label (``superclass_k``, the neighbours counted, checked)."""
    if isinstance(superclass_k, bool) or not isinstance(superclass_k, numbers.Integral) or superclass_k < 1:
        raise ValueError(f"superclass_k must be a positive integer, but got {superclass_k!r}")
    return (superclass_ids(superclass_of, query_labels, "query_labels"),
            superclass_ids(superclass_of, gallery_labels, "gallery_labels"))


def _checked_sets(query, query_labels, gallery, gallery_labels) -> tuple[torch.Tensor, ...]:
    """Query and gallery embeddings and labels as checked tensors on the query's device; the query set itself
    as the gallery for leave-one-out (both None)."""
    leave_one_out = gallery is None and gallery_labels is None
    if (gallery is None) != (gallery_labels is None):
        raise ValueError("gallery and gallery_labels must be given together (or both None for leave-one-out), "
                         f"but got gallery={_shape(gallery)} and gallery_labels={_shape(gallery_labels)}")
    query, query_labels = _check_pair("query", query, query_labels, device=None)
    if leave_one_out:
        gallery, gallery_labels = query, query_labels
    else:
        gallery, gallery_labels = _check_pair("gallery", gallery, gallery_labels, device=query.device)
    _check_same_size(query, gallery)
    if len(gallery) - int(leave_one_out) < 1:
        raise ValueError(f"leave-one-out retrieval needs at least 2 queries, but got {len(query)}")
    return query, query_labels, gallery, gallery_labels


def default_knn() -> Callable:
    """PML's k-NN: its faiss one where faiss is installed, else its torch one (Euclidean, as here).

    Always pass one to ``AccuracyCalculator``: its default, ``FaissKNN()``, is built even for metrics that
    search nothing (NMI) and fails with ``NameError: name 'faiss' is not defined`` where faiss is absent."""
    if knn_search.faiss is not None:
        return FaissKNN()
    return CustomKNN(LpDistance(normalize_embeddings=False), batch_size=knn_search.MAX_BLOCK_ROWS)


# rows x clusters above which scikit-learn's k-means is slow: 10,000 x 2,000 took 12.4 s (faiss 0.76 s) on 2 cores
SLOW_KMEANS_WORK = 5_000_000
NMI_SEED = 0  # k-means' seed: the same clustering of the same embeddings in every epoch and run


def nmi(embeddings, labels, seed: int = NMI_SEED) -> float:
    """``nmi``: normalised mutual information between the classes and a k-means clustering of ``embeddings``
    into as many clusters as there are classes (the NMI of metric learning, e.g. Song et al. 2016;
    Musgrave et al. 2020 Sec. 3.2), computed by PML's ``AccuracyCalculator`` ("NMI": k-means, then
    scikit-learn's ``normalized_mutual_info_score``, arithmetic normalisation). The k-means is seeded by
    ``seed`` and runs where the embeddings are (:func:`xbm.evaluate.kmeans.kmeans_for`: faiss's on the CPU,
    faiss's loop with a torch assignment on a GPU, scikit-learn's without faiss)."""
    x = _check_embeddings("embeddings", embeddings, device=None)
    if knn_search.faiss is None:
        x = x.cpu()   # scikit-learn's k-means
    y = torch.as_tensor(labels).to(x.device)
    if y.shape != (len(x),):
        raise ValueError(f"labels must have shape ({len(x)},) to match the embeddings, but got {tuple(y.shape)}")
    classes = len(y.unique())
    if knn_search.faiss is None and len(x) * classes > SLOW_KMEANS_WORK:
        warnings.warn(f"nmi: k-means of {len(x)} embeddings into {classes} clusters without faiss (scikit-"
                      f"learn's) takes minutes at each evaluation; pip install faiss-cpu (16x faster here), or set "
                      f"eval_nmi=false to leave the nmi column empty", stacklevel=2)
    calc = pml_acc.AccuracyCalculator(include=("NMI",), kmeans_func=kmeans_for(x.device, seed),
                                      knn_func=default_knn(), device=x.device)
    return float(calc.get_accuracy(x, y, include=("NMI",))["NMI"])


def _relabel_by_class_size(knn_labels: torch.Tensor, labels: torch.Tensor, class_size: torch.Tensor):
    """An equivalent labelling for PML's metrics, one label per distinct class size instead of per class.

    PML's MAP@R and R-precision loop in Python over the labels of ``label_counts`` (12,000 classes for SOP)
    to build their relevance masks, which depend only on each query's class size R. A neighbour is relevant
    iff it shares the query's class; labelling query i with g_i (the index of its class size among the
    block's sizes) and each neighbour with g_i when it is of i's class, -1 otherwise, keeps every
    comparison and every count, so the metrics are unchanged, and the loop runs over a handful of sizes.
    """
    sizes, group = torch.unique(class_size, return_inverse=True)
    relabelled = torch.where(knn_labels == labels[:, None], group[:, None], torch.full_like(knn_labels, -1))
    return relabelled, group, (torch.arange(len(sizes), device=sizes.device), sizes)


def superclass_ids(superclass_of, labels: torch.Tensor, name: str = "labels") -> torch.Tensor:
    """``superclass_of[labels]``, checking that the labels are class ids that index ``superclass_of``."""
    superclass_of = torch.as_tensor(superclass_of, device=labels.device)
    if labels.dtype.is_floating_point or int(labels.min()) < 0 or int(labels.max()) >= len(superclass_of):
        raise ValueError(f"{name} must be integer class ids in [0, {len(superclass_of)}) to index superclass_of, "
                         f"but got {labels.dtype} values in [{labels.min().item()}, {labels.max().item()}]")
    return superclass_of[labels]


def nearest_neighbours(query, k: int, gallery=None, *, knn: str = "auto") -> torch.Tensor:
    """(N, min(k, available)) int64 indices of each query's k nearest gallery rows, nearest first (Euclidean).

    With ``gallery=None``, leave-one-out on ``query`` (a row never lists itself). Searched block by block,
    with the backend rules of ``retrieval_metrics``.
    """
    if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1:
        raise ValueError(f"k must be a positive integer, but got {k!r}")
    query = _check_embeddings("query", query, device=None)
    if gallery is not None:
        gallery = _check_embeddings("gallery", gallery, device=query.device)
        _check_same_size(query, gallery)
    available = len(query) - 1 if gallery is None else len(gallery)
    if available < 1:
        raise ValueError(f"leave-one-out search needs at least 2 rows, but got {len(query)}")
    depth = min(int(k), available)
    return torch.cat([block for _, block in knn_search.iter_neighbours(query, depth, gallery, knn=knn)])


def _check_ks(ks) -> tuple[int, ...]:
    ks = tuple(ks) if isinstance(ks, Iterable) else (ks,)
    bad = [k for k in ks if isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 1]
    if not ks or bad or len(set(ks)) != len(ks):
        raise ValueError(f"ks must be distinct positive integers, e.g. (1, 10), but got {ks!r}")
    return tuple(int(k) for k in ks)


def _check_same_size(query: torch.Tensor, gallery: torch.Tensor) -> None:
    if query.shape[1] != gallery.shape[1]:
        raise ValueError(f"query and gallery must have the same embedding size, but got {query.shape[1]} "
                         f"and {gallery.shape[1]}")


def _check_embeddings(name: str, embeddings, device) -> torch.Tensor:
    embeddings = torch.as_tensor(embeddings)
    device = embeddings.device if device is None else device
    embeddings = embeddings.detach().to(device=device, dtype=torch.float32).contiguous()
    if embeddings.ndim != 2 or len(embeddings) == 0:
        raise ValueError(f"{name} must be a non-empty (N, D) matrix, but got shape {tuple(embeddings.shape)}")
    # A row's sum is NaN or inf when any entry is (15x faster than isfinite on every entry); only
    # flagged rows, or rows whose finite entries overflowed the sum, get the exact test.
    flagged = ~torch.isfinite(embeddings.sum(dim=1))
    if bool(flagged.any()):
        bad = int((~torch.isfinite(embeddings[flagged]).all(dim=1)).sum())
        if bad:
            raise ValueError(f"{name} embeddings must be finite, but {bad} of {len(embeddings)} rows contain "
                             "NaN or inf (did training diverge?)")
    return embeddings


def _check_pair(name: str, embeddings, labels, device) -> tuple[torch.Tensor, torch.Tensor]:
    embeddings = _check_embeddings(name, embeddings, device)
    labels = torch.as_tensor(labels, device=embeddings.device)
    if labels.shape != (len(embeddings),):
        raise ValueError(f"{name}_labels must have shape ({len(embeddings)},) to match {name}, "
                         f"but got {tuple(labels.shape)}")
    return embeddings, labels


def _shape(x):
    return None if x is None else tuple(getattr(x, "shape", ()))
