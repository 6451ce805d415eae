import numpy as np
import pytest
import torch

from xbm.data import build_dataset


def test_digits_train_0_to_4_test_5_to_9(config, check_splits):
    splits = build_dataset(config(dataset="digits", image_size=24))
    check_splits(splits)
    assert splits.num_classes == 10 and splits.superclass_of is None
    assert splits.input_kind == "image" and splits.input_shape == (1, 24, 24)
    assert len(splits.train) + len(splits.test.query) == 1797
    image = splits.train.source.load(0)
    assert image.size == (8, 8) and image.mode == "RGB"
    assert splits.train.source.images.min() == 0 and splits.train.source.images.max() == 255  # 0-16 -> 0-255
    # label ids keep the digit order: digits 0-4 -> 0-4, digits 5-9 -> 5-9
    assert splits.test.query.labels.unique().tolist() == [5, 6, 7, 8, 9]


def test_digits_enter_as_one_grey_channel_strokes_high_normalised_by_their_own_statistics(config):
    """Bug caught: digits pushed through ImageNet statistics from scratch, or their polarity flipped."""
    splits = build_dataset(config(dataset="digits", image_size=16))
    assert splits.augment == "shift"
    decoded = np.asarray(splits.transforms.images(int(splits.train.indices[0])))
    assert decoded.shape == (8, 8) and decoded[0, 0] == 0 and decoded.max() > 200  # background 0, strokes high
    (mean,), (std,) = splits.statistics.mean, splits.statistics.std
    assert 0.1 < mean < 0.5 and std > 0.2  # digits cover about a third of the 8x8 square
    x = splits.batch_transform("eval")(splits.test.query[0][0][None])[0]
    assert x.shape == (1, 16, 16) and float(x[0, 0, 0]) == pytest.approx(-mean / std, abs=1e-5)


def first_eval_input(splits):
    return splits.batch_transform("eval")(splits.test.query[0][0][None])[0]


def test_digits_imagenet_and_no_normalisation_on_request(config):
    x = first_eval_input(build_dataset(config(dataset="digits", image_size=16, normalize="imagenet")))
    assert float(x[0, 0, 0]) == pytest.approx(-((0.485 + 0.456 + 0.406) / 3) / 0.226, abs=1e-4)
    x = first_eval_input(build_dataset(config(dataset="digits", image_size=16, normalize="none")))
    assert float(x[0, 0, 0]) == 0.0 and float(x.max()) <= 1.0
