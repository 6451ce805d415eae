"""``knn_accuracy`` in the per-epoch evaluation (xbm.evaluate.epoch.knn)."""
import math

import numpy as np
import torch

from xbm.data.base import EvalSplit, SampleDataset, Transforms
from xbm.data.sources import VectorSource
from xbm.evaluate import knn_accuracy
from xbm.evaluate import epoch as evaluation
from xbm.training.loaders import Embedder
from xbm.training.runtime import Runtime


def _datasets(vectors, train_labels, query_labels):
    source = VectorSource(torch.as_tensor(vectors, dtype=torch.float32))
    n_train = len(train_labels)
    transforms = Transforms(8)
    train = SampleDataset(source, np.arange(n_train), np.asarray(train_labels), transforms, "eval")
    query = SampleDataset(source, np.arange(n_train, len(vectors)), np.asarray(query_labels), transforms, "eval")
    return train, EvalSplit(query)


class Counting(Embedder):
    calls = 0

    def __call__(self, model, dataset, indices=None):
        Counting.calls += 1
        return super().__call__(model, dataset, indices)


def test_knn_accuracy_votes_with_the_training_set_as_the_bank():
    """Bug caught: the bank taken from the split itself (leave-one-out retrieval, not MoCo's monitor), labels
    of the bank and the queries swapped, or the model bypassed (raw inputs)."""
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(60, 4))
    train, split = _datasets(vectors, [0, 1, 2] * 15, [0, 1, 2] * 5)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3))
    embed = Embedder(Runtime.from_config("cpu", "off", False), 0)
    got = evaluation.knn(model, split, train, embed)["knn_accuracy"]
    with torch.no_grad():
        z = model(torch.as_tensor(vectors, dtype=torch.float32))
    want = knn_accuracy(z[45:], torch.tensor([0, 1, 2] * 5), z[:45], torch.tensor([0, 1, 2] * 15), 20, 0.1)
    assert got == want and 0.0 < want < 1.0


def test_class_disjoint_splits_give_nan_without_embedding_anything():
    """Bug caught: a whole training set embedded every epoch for a metric that cannot exist (no query class
    in the bank), or 0.0 reported as if the model had failed."""
    vectors = np.zeros((12, 4))
    train, split = _datasets(vectors, [0, 0, 1, 1, 2, 2, 3, 3], [4, 4, 5, 5])
    Counting.calls = 0
    embed = Counting(Runtime.from_config("cpu", "off", False), 0)
    result = evaluation.knn(torch.nn.Identity(), split, train, embed)
    assert math.isnan(result["knn_accuracy"]) and Counting.calls == 0
