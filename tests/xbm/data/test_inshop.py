import pytest
import torch

from xbm.data import build_dataset
from xbm.errors import DatasetNotFoundError

# (image_name, item_id, status); items 1-2 train, items 3-5 evaluated, item 5 only in query (dropped)
ROWS = [
    ("img/WOMEN/Dresses/id_00000001/01_1_front.jpg", "id_00000001", "train"),
    ("img/WOMEN/Dresses/id_00000001/01_2_side.jpg", "id_00000001", "train"),
    ("img/MEN/Denim/id_00000002/01_1_front.jpg", "id_00000002", "train"),
    ("img/MEN/Denim/id_00000002/01_2_side.jpg", "id_00000002", "train"),
    ("img/WOMEN/Denim/id_00000003/01_1_front.jpg", "id_00000003", "query"),
    ("img/WOMEN/Denim/id_00000003/01_2_side.jpg", "id_00000003", "gallery"),
    ("img/WOMEN/Dresses/id_00000004/01_1_front.jpg", "id_00000004", "query"),
    ("img/WOMEN/Dresses/id_00000004/01_2_side.jpg", "id_00000004", "gallery"),
    ("img/WOMEN/Dresses/id_00000004/01_3_back.jpg", "id_00000004", "gallery"),
    ("img/MEN/Denim/id_00000005/01_1_front.jpg", "id_00000005", "query"),
]


def make_inshop(root, write_image, image_folder=""):
    (root / "Eval").mkdir(parents=True)
    lines = [str(len(ROWS)), "image_name item_id evaluation_status"]
    lines += [f"{name:<60}{item} {status}" for name, item, status in ROWS]
    (root / "Eval" / "list_eval_partition.txt").write_text("\n".join(lines) + "\n")
    for k, (name, _, _) in enumerate(ROWS):
        write_image(root / image_folder / name, value=k)


@pytest.mark.parametrize("image_folder", ["", "Img"])
def test_inshop_query_gallery(tmp_path, write_image, config, check_splits, image_folder):
    make_inshop(tmp_path, write_image, image_folder)
    splits = build_dataset(config(dataset="inshop", data_root=str(tmp_path)))
    check_splits(splits)
    assert len(splits.train) == 4 and len(splits.test.query) == 2 and len(splits.test.gallery) == 3
    assert splits.test.query.labels.tolist() == [2, 3] and splits.test.gallery.labels.tolist() == [2, 3, 3]
    # super-classes: MEN/Denim, WOMEN/Denim, WOMEN/Dresses (sorted) -> 0, 1, 2
    assert splits.superclass_of.tolist() == [2, 0, 1, 2]  # item 5 (query only) is dropped
    x, label, index = splits.test.gallery[2]
    assert (label, index) == (3, 2) and x.shape == (3, 16, 16)


def test_inshop_uses_trainer_transforms(tmp_path, write_image, config):
    make_inshop(tmp_path, write_image)
    splits = build_dataset(config(dataset="inshop", data_root=str(tmp_path)))
    splits.set_transforms(lambda image: torch.tensor([1.0]), lambda image: torch.tensor([2.0, image.width]))
    assert splits.train[0][0].tolist() == [1.0]
    assert splits.test.query[0][0].tolist() == [2.0, 12.0] and splits.test.gallery[0][0].tolist() == [2.0, 12.0]
    splits.set_transforms(None, None)
    assert splits.train[0][0].shape == (3, 16, 16)


def test_inshop_missing_partition(tmp_path, config):
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="inshop", data_root=str(tmp_path)))
    assert str(tmp_path / "Eval" / "list_eval_partition.txt") in str(info.value)
    assert "img/WOMEN/Dresses" in str(info.value)


def test_inshop_rejects_unknown_status(tmp_path, write_image, config):
    make_inshop(tmp_path, write_image)
    path = tmp_path / "Eval" / "list_eval_partition.txt"
    path.write_text(path.read_text().replace("gallery", "galery", 1))
    with pytest.raises(ValueError, match="status"):
        build_dataset(config(dataset="inshop", data_root=str(tmp_path)))
