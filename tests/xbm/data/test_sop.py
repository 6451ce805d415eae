import pytest

from xbm.data import build_dataset
from xbm.errors import DatasetNotFoundError


def make_sop(root, write_image, wrapper=""):
    """4 train products (ids 1-4) and 3 test products (ids 5-7), 2-3 photos each, 2 super-classes."""
    base = root / wrapper if wrapper else root
    rows = {"train": [], "test": []}
    image_id = 0
    for cls in range(1, 8):
        split = "train" if cls <= 4 else "test"
        super_id, folder = (1, "bicycle_final") if cls % 2 else (2, "chair_final")
        for k in range(2 + cls % 2):
            image_id += 1
            path = f"{folder}/{cls}_{k}.JPG"
            write_image(base / path, value=image_id)
            rows[split].append(f"{image_id} {cls} {super_id} {path}")
    for split in rows:
        (base / f"Ebay_{split}.txt").write_text("image_id class_id super_class_id path\n"
                                                + "\n".join(rows[split]) + "\n")
    return base


@pytest.mark.parametrize("wrapper", ["", "Stanford_Online_Products"])
def test_sop_splits(tmp_path, write_image, config, check_splits, wrapper):
    make_sop(tmp_path, write_image, wrapper)
    splits = build_dataset(config(dataset="sop", data_root=str(tmp_path)))
    check_splits(splits)
    assert len(splits.train) == 10 and len(splits.test.query) == 8 and splits.test.gallery is None
    assert splits.num_classes == 7 and splits.input_shape == (3, 16, 16)
    # classes 1,3 (odd) in super 1, 2,4 in super 2 -> train ids 0..3 alternate super-classes
    assert splits.superclass_of.tolist() == [0, 1, 0, 1, 0, 1, 0]


def test_sop_val_split_is_class_disjoint(tmp_path, write_image, config, check_splits):
    make_sop(tmp_path, write_image)
    splits = build_dataset(config(dataset="sop", data_root=str(tmp_path), val_fraction=0.5))
    check_splits(splits)
    assert splits.train_labels.unique().numel() == 2 and splits.val.query.labels.unique().numel() == 2


def test_sop_missing_file_names_path_and_layout(tmp_path, write_image, config):
    make_sop(tmp_path, write_image)
    (tmp_path / "Ebay_test.txt").unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="sop", data_root=str(tmp_path)))
    message = str(info.value)
    assert str(tmp_path / "Ebay_test.txt") in message and "Ebay_train.txt" in message and "'sop'" in message


def test_sop_missing_images_fail_early(tmp_path, write_image, config):
    make_sop(tmp_path, write_image)
    (tmp_path / "bicycle_final" / "1_0.JPG").unlink()
    with pytest.raises(DatasetNotFoundError, match="extract"):
        build_dataset(config(dataset="sop", data_root=str(tmp_path)))
