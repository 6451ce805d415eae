import pytest

from xbm.data import build_dataset
from xbm.errors import DatasetNotFoundError


def make_cub(root, write_image, classes=(1, 2, 100, 101, 150, 200), per_class=2):
    base = root / "CUB_200_2011"
    images, labels = [], []
    for cls in classes:
        for k in range(per_class):
            image_id = len(images) + 1
            path = f"{cls:03d}.Bird_{cls}/Bird_{cls}_{k}.jpg"
            write_image(base / "images" / path, value=image_id)
            images.append(f"{image_id} {path}")
            labels.append(f"{image_id} {cls}")
    (base / "images.txt").write_text("\n".join(images) + "\n")
    (base / "image_class_labels.txt").write_text("\n".join(labels) + "\n")
    return base


def test_cub200_first_100_classes_train(tmp_path, write_image, config, check_splits):
    make_cub(tmp_path, write_image)
    splits = build_dataset(config(dataset="cub200", data_root=str(tmp_path)))
    check_splits(splits)
    assert len(splits.train) == 6 and len(splits.test.query) == 6 and splits.test.gallery is None
    assert splits.superclass_of is None and splits.num_classes == 6
    assert splits.train.source.load(int(splits.train.indices[2])).getpixel((3, 3)) == (3, 3, 3)


def test_cub200_accepts_the_release_folder_as_root(tmp_path, write_image, config):
    base = make_cub(tmp_path, write_image)
    assert len(build_dataset(config(dataset="cub200", data_root=str(base))).train) == 6


def test_cub200_missing_labels(tmp_path, write_image, config):
    base = make_cub(tmp_path, write_image)
    (base / "image_class_labels.txt").unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="cub200", data_root=str(tmp_path)))
    assert str(base / "image_class_labels.txt") in str(info.value) and "images.txt" in str(info.value)


def test_cub200_missing_root(tmp_path, config):
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="cub200", data_root=str(tmp_path / "nowhere")))
    assert str(tmp_path / "nowhere") in str(info.value) and "CUB_200_2011/" in str(info.value)
    with pytest.raises(DatasetNotFoundError, match="data_root"):
        build_dataset(config(dataset="cub200"))
