"""Weighted k-NN classification accuracy, the label-free objectives' monitor (InstDisc, Wu et al. 2018, §3.5;
MoCo's CIFAR demo ``knn_predict``; seed 001 App. B reports it for MoCo + XBN).

For a query q (L2-normalised) and its k most similar bank rows b_1..b_k by cosine similarity s_i, class c
scores  sum_i [label(b_i) = c] exp(s_i / T);  the prediction is the class of largest score.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

SIMILARITY_ELEMENTS = 2**25  # one query chunk's similarities to the bank, rows x bank (128 MiB in fp32)


def knn_accuracy(query: torch.Tensor, query_labels: torch.Tensor, bank: torch.Tensor, bank_labels: torch.Tensor,
                 k: int = 20, temperature: float = 0.1) -> float:
    """Fraction of queries whose weighted k-NN vote over ``bank`` (module docstring) names their own class.

    ``query`` (q, d) and ``bank`` (b, d): embeddings, normalised here; labels: (q,) and (b,) integers.
    ``k`` is capped at b. Only queries whose class occurs in the bank count: a class the bank never saw
    cannot be predicted. Returns NaN when no query's class is in the bank, as on class-disjoint
    metric-learning splits (CUB, Cars, SOP: test classes are unseen in training), where Recall@K and MAP@R
    are the measures. Vote ties go to the smallest class label. Computed on the bank's device, in chunks
    of queries so that no similarity matrix exceeds ``SIMILARITY_ELEMENTS``.
    """
    _check(query, query_labels, bank, bank_labels, k, temperature)
    device = bank.device
    classes, bank_class = torch.unique(bank_labels.to(device), return_inverse=True)  # classes sorted
    query_labels = query_labels.to(device)
    position = torch.searchsorted(classes, query_labels).clamp(max=len(classes) - 1)
    known = classes[position] == query_labels
    if not known.any():
        return float("nan")
    query, target = query.to(device)[known], position[known]
    bank = F.normalize(bank.float(), dim=1)
    k = min(k, len(bank))
    rows = max(1, SIMILARITY_ELEMENTS // len(bank))
    correct: float = 0  # .item() of a sum: an int, typed int | float
    for start in range(0, len(query), rows):
        chunk = F.normalize(query[start: start + rows].float(), dim=1)
        sims, nearest = torch.topk(chunk @ bank.T, k, dim=1)  # (rows, k)
        votes = torch.zeros(len(chunk), len(classes), device=device)
        votes.scatter_add_(1, bank_class[nearest], torch.exp(sims / temperature))
        correct += (votes.argmax(dim=1) == target[start: start + rows]).sum().item()
    return correct / len(query)


def _check(query, query_labels, bank, bank_labels, k, temperature) -> None:
    for name, x in (("query", query), ("bank", bank)):
        if x.dim() != 2:
            raise ValueError(f"knn_accuracy: {name} must be a 2-D (rows, dim) tensor, but got {tuple(x.shape)}")
    if query.shape[1] != bank.shape[1]:
        raise ValueError(f"knn_accuracy: query and bank must share the embedding size, but got "
                         f"{query.shape[1]} and {bank.shape[1]}")
    for name, labels, x in (("query_labels", query_labels, query), ("bank_labels", bank_labels, bank)):
        if labels.shape != (len(x),) or labels.is_floating_point():
            raise ValueError(f"knn_accuracy: {name} must be ({len(x)},) integers, one per row, but got "
                             f"{labels.dtype} of shape {tuple(labels.shape)}")
    if len(bank) == 0:
        raise ValueError("knn_accuracy: the bank is empty")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"knn_accuracy: k must be an integer >= 1, but got {k!r}")
    if not temperature > 0:
        raise ValueError(f"knn_accuracy: temperature > 0 must hold, but got {temperature!r}")
