"""The per-epoch evaluation's ``knn_accuracy`` (xbm.evaluate.epoch.knn) and ``staleness_mean`` (.staleness)."""
import math

import numpy as np
import pytest
import torch

from xbm.data.base import EvalSplit, SampleDataset, Transforms
from xbm.data.sources import VectorSource
from xbm.evaluate import epoch as evaluation, knn_accuracy
from xbm.memory import EmbeddingMemory
from xbm.runtime.device import Runtime
from xbm.training.loaders import Embedder


def _datasets(vectors, train_labels, query_labels):
    source = VectorSource(torch.as_tensor(vectors, dtype=torch.float32))
    n_train = len(train_labels)
    transforms = Transforms(8)
    train = SampleDataset(source, np.arange(n_train), np.asarray(train_labels), transforms, "eval")
    query = SampleDataset(source, np.arange(n_train, len(vectors)), np.asarray(query_labels), transforms, "eval")
    return train, EvalSplit(query)


class Counting(Embedder):
    calls = 0

    def __call__(self, model, dataset, indices=None, keep=True):
        Counting.calls += 1
        return super().__call__(model, dataset, indices, keep)


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


def _memory_of(train, model, samples, offsets):
    """A memory holding ``samples`` (training indices, -1 unknown) as the model's current embedding moved by
    ``offsets`` along one axis: each row's staleness is its offset."""
    z = Embedder(Runtime.from_config("cpu", "off", False), 0)(model, train)[0]
    samples = torch.as_tensor(samples)
    rows = z[samples.clamp(min=0)].clone()
    rows[:, 0] += torch.as_tensor(offsets, dtype=torch.float32)
    memory = EmbeddingMemory(len(samples), z.shape[1])
    memory.enqueue(rows, torch.zeros(len(samples), dtype=torch.long), samples)
    return memory, z


def test_staleness_takes_the_probe_rows_with_the_drift_probe_embeddings_and_embeds_nothing_more():
    """Bugs caught: a second forward pass over other training samples every epoch when the drift probe's
    samples fill enough memory rows (the cost bench-gpu's evaluation table shows), a stored row paired with
    another sample's current embedding, or rows outside the probe counted in."""
    rng = np.random.default_rng(0)
    train, _ = _datasets(rng.normal(size=(300, 4)), [0] * 300, [])
    model = torch.nn.Linear(4, 3)
    probe = torch.arange(0, 300, 3).flip(0)   # 100 samples, not sorted; 67 of them in the memory
    offsets = torch.where(torch.arange(200) % 3 == 0, 0.5, 2.0) + torch.arange(200) / 1000
    memory, z = _memory_of(train, model, torch.arange(200), offsets)
    Counting.calls = 0
    embed = Counting(Runtime.from_config("cpu", "off", False), 0)
    got = evaluation.staleness(model, train, memory, embed, seed=0, epoch=1, probe=probe, probe_now=z[probe])
    assert Counting.calls == 0
    assert got["staleness_mean"] == pytest.approx(float(offsets[::3].mean()), rel=1e-5)


def test_staleness_makes_up_its_least_rows_with_drawn_rows_of_a_small_memory():
    """Bugs caught: a memory ratio of 0.01 measured on the two or three probe samples it holds, too many rows
    drawn (``least`` on top of the probe's), a drawn row that is a probe row counted twice, or a row without a
    training index re-embedded as sample 0."""
    rng = np.random.default_rng(1)
    train, _ = _datasets(rng.normal(size=(300, 4)), [0] * 300, [])
    model = torch.nn.Linear(4, 3)
    probe = torch.arange(0, 300, 3)
    samples = torch.cat([torch.arange(100), torch.tensor([-1, -1])])   # 34 probe rows, 66 others, 2 unknown
    offsets = torch.cat([torch.where(torch.arange(100) % 3 == 0, 0.5, 1.0), torch.tensor([9.0, 9.0])])
    memory, z = _memory_of(train, model, samples, offsets)
    Counting.calls = 0
    embed = Counting(Runtime.from_config("cpu", "off", False), 0)
    got = evaluation.staleness(model, train, memory, embed, seed=0, epoch=1, probe=probe, probe_now=z[probe])
    assert Counting.calls == 1
    assert got["staleness_mean"] == pytest.approx((34 * 0.5 + 30 * 1.0) / 64, rel=1e-5)
    tiny, _ = _memory_of(train, model, samples[-12:], offsets[-12:])   # 4 probe rows, 6 others, 2 unknown
    got = evaluation.staleness(model, train, tiny, embed, seed=0, epoch=1, probe=probe, probe_now=z[probe])
    assert got["staleness_mean"] == pytest.approx((4 * 0.5 + 6 * 1.0) / 10, rel=1e-5)
