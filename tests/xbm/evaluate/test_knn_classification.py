"""knn_accuracy (weighted k-NN vote, InstDisc / MoCo demo) against hand-computed cases and a float64 loop."""
import math

import numpy as np
import pytest
import torch

from xbm.evaluate import knn_accuracy
from xbm.evaluate import knn_classification

# Query (1, 0), label 0. Bank: one class-0 row at similarity 1, two class-1 rows at similarity 0.5.
QUERY, QUERY_LABELS = torch.tensor([[1.0, 0.0]]), torch.tensor([0])
BANK = torch.tensor([[1.0, 0.0], [0.5, math.sqrt(3) / 2], [0.5, -math.sqrt(3) / 2]])
BANK_LABELS = torch.tensor([0, 1, 1])


@pytest.mark.parametrize("temperature, k, expected", [
    (0.1, 3, 1.0),  # class 0: e^10 = 22026 > class 1: 2 e^5 = 297: the weights overturn the 2-1 majority
    (1.0, 3, 0.0),  # class 0: e^1 = 2.72 < class 1: 2 e^0.5 = 3.30: the majority wins
    (1.0, 1, 1.0),  # only the nearest row votes
])
def test_weights_decide_the_vote(temperature, k, expected):
    """Bug: a plain majority vote (weights ignored), weights not divided by the temperature, or k ignored."""
    assert knn_accuracy(QUERY, QUERY_LABELS, BANK, BANK_LABELS, k=k, temperature=temperature) == expected


def test_rows_are_normalised():
    """Bug: raw inner products: a bank scaled by 3 turns the T = 1 case above (0.0) into e^3 = 20.1 >
    2 e^1.5 = 9.0, accuracy 1.0. Cosine similarity must ignore the scale of queries and bank rows."""
    assert knn_accuracy(2 * QUERY, QUERY_LABELS, 3 * BANK, BANK_LABELS, k=3, temperature=1.0) == 0.0


def test_only_queries_of_bank_classes_count():
    """Bug: queries of unseen classes counted as errors (an accuracy of 1/2 here instead of 1), or an
    arbitrary number rather than NaN when no query's class is in the bank (class-disjoint splits)."""
    query = torch.cat([QUERY, QUERY])
    assert knn_accuracy(query, torch.tensor([0, 5]), BANK, BANK_LABELS, k=3, temperature=0.1) == 1.0
    assert math.isnan(knn_accuracy(query, torch.tensor([5, 6]), BANK, BANK_LABELS))


def reference_accuracy(query, query_labels, bank, bank_labels, k, temperature):
    """One query at a time in float64: cosine similarities, the k most similar, summed exp(s / T) per class."""
    q = query.double().numpy() / np.linalg.norm(query.double().numpy(), axis=1, keepdims=True)
    b = bank.double().numpy() / np.linalg.norm(bank.double().numpy(), axis=1, keepdims=True)
    correct = total = 0
    for row, label in zip(q, query_labels.tolist()):
        if label not in bank_labels.tolist():
            continue
        sims = b @ row
        nearest = np.argsort(-sims)[:k]
        scores = {}
        for i in nearest:
            scores[bank_labels[i].item()] = scores.get(bank_labels[i].item(), 0.0) + np.exp(sims[i] / temperature)
        correct += max(scores, key=scores.get) == label
        total += 1
    return correct / total


def test_matches_reference_in_chunks(monkeypatch):
    """Bug: query chunks misaligned with their labels (an offset lost between chunks), or sparse,
    negative class labels mapped to the wrong vote column."""
    monkeypatch.setattr(knn_classification, "SIMILARITY_ELEMENTS", 7 * 60)  # bank of 60: 7 queries a chunk
    generator = torch.Generator().manual_seed(0)
    classes = torch.tensor([-3, 4, 100, 7])
    bank_labels = classes[torch.randint(0, 4, (60,), generator=generator)]
    centres = torch.randn(4, 6, generator=generator)
    bank = centres[torch.searchsorted(classes.sort().values, bank_labels)] + torch.randn(60, 6, generator=generator)
    query_labels = torch.cat([classes, torch.tensor([9])])[torch.randint(0, 5, (45,), generator=generator)]
    known = query_labels != 9
    query = torch.randn(45, 6, generator=generator)
    query[known] += centres[torch.searchsorted(classes.sort().values, query_labels[known])]
    expected = reference_accuracy(query, query_labels, bank, bank_labels, k=20, temperature=0.1)
    assert 0.2 < expected < 1.0  # neither trivial nor perfect
    assert knn_accuracy(query, query_labels, bank, bank_labels) == pytest.approx(expected)


@pytest.mark.parametrize("kwargs, message", [
    ({"k": 0}, "k must be"), ({"temperature": 0.0}, "temperature"),
    ({"bank": torch.ones(3, 5)}, "embedding size"), ({"bank_labels": torch.tensor([0, 1])}, "bank_labels"),
])
def test_rejects_bad_inputs(kwargs, message):
    """Bug: mismatched shapes broadcast silently into a wrong accuracy."""
    arguments = {"query": QUERY, "query_labels": QUERY_LABELS, "bank": BANK, "bank_labels": BANK_LABELS} | kwargs
    with pytest.raises(ValueError, match=message):
        knn_accuracy(**arguments)
