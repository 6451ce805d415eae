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
