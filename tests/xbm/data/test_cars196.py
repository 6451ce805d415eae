import numpy as np
import pytest
import scipy.io

from xbm.data import build_dataset
from xbm.errors import DatasetNotFoundError

FIELDS = ["relative_im_path", "bbox_x1", "bbox_y1", "bbox_x2", "bbox_y2", "class", "test"]


def make_cars(root, write_image, classes=(1, 98, 99, 196, 1, 99)):
    annotations = np.zeros((1, len(classes)), dtype=[(f, "O") for f in FIELDS])
    for k, cls in enumerate(classes):
        path = f"car_ims/{k + 1:06d}.jpg"
        write_image(root / path, value=k)
        annotations[0, k] = (path, 0, 0, 5, 5, cls, k % 2)
    scipy.io.savemat(str(root / "cars_annos.mat"),
                     {"annotations": annotations, "class_names": np.array(["a", "b"], dtype=object)})


def test_cars196_first_98_classes_train(tmp_path, write_image, config, check_splits):
    make_cars(tmp_path, write_image)
    splits = build_dataset(config(dataset="cars196", data_root=str(tmp_path)))
    check_splits(splits)
    assert splits.train_labels.tolist() == [0, 1, 0] and splits.test.query.labels.tolist() == [2, 3, 2]
    assert splits.train.source.relpaths[:2] == ["car_ims/000001.jpg", "car_ims/000002.jpg"]
    assert splits.superclass_of is None


def test_cars196_missing_mat(tmp_path, config):
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="cars196", data_root=str(tmp_path)))
    assert str(tmp_path / "cars_annos.mat") in str(info.value) and "car_ims/" in str(info.value)


def test_cars196_wrong_mat(tmp_path, config):
    scipy.io.savemat(str(tmp_path / "cars_annos.mat"), {"something": np.zeros(3)})
    with pytest.raises(ValueError, match="annotations"):
        build_dataset(config(dataset="cars196", data_root=str(tmp_path)))
