import json

import pytest

from xbm.data import build_dataset
from xbm.errors import DatasetNotFoundError


def item(box, category, style):
    return {"bounding_box": box, "category_id": category, "style": style, "segmentation": [], "landmarks": []}


# split -> {image stem: annotation}; class = (pair_id, category_id, style) with style > 0
ANNOS = {
    "train": {
        "000001": {"source": "user", "pair_id": 1, "item1": item([2, 2, 10, 8], 1, 1),
                   "item2": item([0, 0, 4, 4], 7, 0)},  # style 0: not a retrieval item
        "000002": {"source": "shop", "pair_id": 1, "item1": item([1, 1, 9, 9], 1, 1)},
        "000003": {"source": "shop", "pair_id": 2, "item1": item([0, 0, 12, 10], 3, 1),
                   "item2": item([5, 5, 11, 9], 3, 2)},
    },
    "validation": {
        "000001": {"source": "user", "pair_id": 1, "item1": item([0, 0, 6, 6], 1, 1),
                   "item2": item([3, 3, 9, 9], 8, 1)},  # (1, 8, 1) has no shop crop: dropped
        "000002": {"source": "shop", "pair_id": 1, "item1": item([2, 1, 30, 30], 1, 1)},  # box crosses border
        "000003": {"source": "shop", "pair_id": 1, "item1": item([0, 0, 7, 5], 1, 1)},
    },
}


def make_deepfashion2(root, write_image):
    for split, annos in ANNOS.items():
        for stem, anno in annos.items():
            write_image(root / split / "image" / f"{stem}.jpg", size=(12, 10))
            (root / split / "annos").mkdir(parents=True, exist_ok=True)
            (root / split / "annos" / f"{stem}.json").write_text(json.dumps(anno))


def test_deepfashion2_crops_and_pairs(tmp_path, write_image, config, check_splits):
    make_deepfashion2(tmp_path, write_image)
    splits = build_dataset(config(dataset="deepfashion2", data_root=str(tmp_path)))
    check_splits(splits)
    assert len(splits.train) == 4 and splits.train_labels.tolist() == [0, 0, 1, 2]
    assert len(splits.test.query) == 1 and len(splits.test.gallery) == 2
    assert splits.test.query.labels.tolist() == [3] and splits.test.gallery.labels.tolist() == [3, 3]
    # super-class = category_id (1, 3 -> contiguous 0, 1); validation pair 1 is not train pair 1
    assert splits.superclass_of.tolist() == [0, 1, 1, 0]
    source = splits.train.source
    sizes = [source.load(int(j)).size for j in splits.train.indices]
    assert sizes == [(8, 6), (8, 8), (12, 10), (6, 4)]
    assert source.load(int(splits.test.gallery.indices[0])).size == (10, 9)  # clamped to the 12x10 image


def test_deepfashion2_missing_annotations(tmp_path, write_image, config):
    make_deepfashion2(tmp_path, write_image)
    for path in (tmp_path / "validation" / "annos").glob("*.json"):
        path.unlink()
    with pytest.raises(DatasetNotFoundError) as info:
        build_dataset(config(dataset="deepfashion2", data_root=str(tmp_path)))
    assert str(tmp_path / "validation" / "annos") in str(info.value) and "bounding_box" in str(info.value)
