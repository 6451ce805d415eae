import torch

from xbm.data import build_dataset


def test_digits_train_0_to_4_test_5_to_9(config, check_splits):
    splits = build_dataset(config(dataset="digits", image_size=24))
    check_splits(splits)
    assert splits.num_classes == 10 and splits.superclass_of is None
    assert splits.input_kind == "image" and splits.input_shape == (3, 24, 24)
    assert len(splits.train) + len(splits.test.query) == 1797
    image = splits.train.source.load(0)
    assert image.size == (8, 8) and image.mode == "RGB"
    assert splits.train.source.images.min() == 0 and splits.train.source.images.max() == 255  # 0-16 -> 0-255
    # label ids keep the digit order: digits 0-4 -> 0-4, digits 5-9 -> 5-9
    assert splits.test.query.labels.unique().tolist() == [5, 6, 7, 8, 9]


def test_digits_default_transform_normalises(config):
    splits = build_dataset(config(dataset="digits", image_size=16))
    x = splits.train[0][0]
    black = (0.0 - torch.tensor([0.485, 0.456, 0.406])) / torch.tensor([0.229, 0.224, 0.225])
    assert torch.allclose(x[:, 0, 0], black, atol=1e-5)  # the corner of every digit is background
