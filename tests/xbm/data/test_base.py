from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest
import torch

from xbm.data.base import DatasetSplits, EvalSplit, SampleDataset, Transforms
from xbm.data.sources import ArrayImageSource


def make(role="train"):
    source = ArrayImageSource(np.arange(3 * 4 * 4, dtype=np.uint8).reshape(3, 4, 4))
    return SampleDataset(source, np.array([2, 0]), np.array([5, 6]), Transforms(8), role)


def test_items_are_image_label_index():
    dataset = make()
    x, label, index = dataset[1]
    assert x.shape == (3, 8, 8) and (label, index) == (6, 1) and dataset.labels.dtype == torch.long
    assert dataset[-1][2] == 1
    with pytest.raises(IndexError, match="out of range"):
        dataset[2]


def test_lengths_must_match():
    with pytest.raises(ValueError, match="one entry per sample"):
        SampleDataset(make().source, np.array([0, 1]), np.array([0]), Transforms(8), "train")


def test_set_transforms_reaches_every_split_by_role():
    train, query = make("train"), make("eval")
    query.transforms = train.transforms
    splits = DatasetSplits(name="t", train=train, val=None, test=EvalSplit(query), superclass_of=None,
                           num_classes=2, input_kind="image", input_shape=(3, 8, 8), transforms=train.transforms)
    splits.set_transforms(lambda image: "train:%d" % image.width, lambda image: "eval:%d" % image.height)
    assert splits.train[0][0] == "train:4" and splits.test.query[0][0] == "eval:4"
    assert torch.equal(splits.train_labels, torch.tensor([5, 6])) and splits.num_train_classes == 2


def test_a_dataset_reaches_a_worker_small_with_the_same_items():
    """Bug caught: a split's indices pickled by value into every spawned worker (SOP: 60k per split, per worker)."""
    source = ArrayImageSource(np.arange(7 * 4 * 4, dtype=np.uint8).reshape(7, 4, 4))
    n = 300_000
    dataset = SampleDataset(source, np.arange(n) % 7, np.arange(n) % 3, Transforms(4), "eval")
    data = ForkingPickler.dumps(dataset)
    received = ForkingPickler.loads(data)
    assert len(data) < 8192 and np.array_equal(received.indices, dataset.indices)
    assert torch.equal(received.labels, dataset.labels)
    for i in (0, 6, n - 1):
        assert torch.equal(received[i][0], dataset[i][0]) and received[i][1:] == dataset[i][1:]


def test_labels_are_the_dataset_s_own_so_a_worker_receiving_another_leaves_them_intact():
    """Bug caught: the trainer's training view built from ``train.labels.numpy()`` shared the training split's
    memory; a spawned worker receiving the split moves its labels into shared memory (torch swaps the storage)
    and the view read freed memory: garbage labels, or a crash for a large training set."""
    n = 2_000_000   # large enough that the freed buffer goes back to the system
    first = SampleDataset(make().source, np.zeros(n, np.int64), np.arange(n) % 5, Transforms(4), "train")
    view = SampleDataset(first.source, first.indices, first.labels.numpy(), first.transforms, "eval")
    assert view.labels.data_ptr() != first.labels.data_ptr()
    ForkingPickler.dumps(first)
    assert first.labels.is_shared() and torch.equal(view.labels, torch.arange(n) % 5)
