import pickle

import numpy as np
import pytest
import torch

from xbm.data import build_dataset
from xbm.errors import BadImageError, DatasetNotFoundError


def _batch(n, offset, **labels):
    data = (np.arange(n)[:, None] + offset + np.zeros((1, 3072))).astype(np.uint8)
    data[:, 1024:2048] = 100  # green plane: checks the channel layout after decoding
    return {b"data": data, **{k.encode(): list(v) for k, v in labels.items()}}


def make_cifar10(root):
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i in range(1, 6):
        with open(folder / f"data_batch_{i}", "wb") as f:
            pickle.dump(_batch(4, 10 * i, labels=[0, 1, 2, i % 3]), f)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump(_batch(6, 200, labels=[0, 1, 2, 0, 1, 2]), f)


def make_cifar100(root):
    folder = root / "cifar-100-python"
    folder.mkdir(parents=True)
    for name, n in (("train", 8), ("test", 4)):
        fine = [k % 4 for k in range(n)]
        with open(folder / name, "wb") as f:
            pickle.dump(_batch(n, 0, fine_labels=fine, coarse_labels=[c // 2 for c in fine]), f)


def test_cifar10_train_and_test_share_classes(tmp_path, config, check_splits):
    make_cifar10(tmp_path)
    splits = build_dataset(config(dataset="cifar10", data_root=str(tmp_path)))
    check_splits(splits, class_disjoint_test=False)
    assert len(splits.train) == 20 and len(splits.test.query) == 6 and splits.test.gallery is None
    assert splits.num_classes == 3 and splits.superclass_of is None
    image = splits.train.source.load(0)
    assert image.size == (32, 32) and image.getpixel((0, 0)) == (10, 100, 10)
    assert splits.test.query.source.load(int(splits.test.query.indices[1])).getpixel((5, 5)) == (201, 100, 201)


def test_cifar100_coarse_labels_are_superclasses(tmp_path, config, check_splits):
    make_cifar100(tmp_path)
    splits = build_dataset(config(dataset="cifar100", data_root=str(tmp_path)))
    check_splits(splits, class_disjoint_test=False)
    assert splits.superclass_of.tolist() == [0, 0, 1, 1]


def test_cifar100_val_classes_leave_training(tmp_path, config, check_splits):
    make_cifar100(tmp_path)
    splits = build_dataset(config(dataset="cifar100", data_root=str(tmp_path), val_fraction=0.25))
    check_splits(splits, class_disjoint_test=False)
    assert splits.train_labels.unique().tolist() == [0, 1, 2] and splits.val.query.labels.unique().tolist() == [3]
    assert torch.equal(splits.test.query.labels.unique(), torch.arange(4))


@pytest.mark.parametrize("name, missing", [("cifar10", "cifar-10-batches-py/data_batch_3"),
                                           ("cifar100", "cifar-100-python/test")])
def test_cifar_missing_file(tmp_path, config, name, missing):
    (make_cifar10 if name == "cifar10" else make_cifar100)(tmp_path)
    (tmp_path / missing).unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset=name, data_root=str(tmp_path)))
    assert str(tmp_path / missing) in str(info.value)
    assert ("data_batch_1" if name == "cifar10" else "coarse_labels") in str(info.value)


def test_a_truncated_batch_file_is_named(tmp_path, config):
    """Bug caught: a truncated pickle batch failing with pickle's "pickle data was truncated", which names
    no file (issue 17: every failed read of images names the file)."""
    make_cifar10(tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_3"
    batch.write_bytes(batch.read_bytes()[:100])
    with pytest.raises(BadImageError) as info:
        build_dataset(config(dataset="cifar10", data_root=str(tmp_path)))
    assert f"cannot read {batch} (data_root {tmp_path})" in str(info.value) and info.value.path == str(batch)
