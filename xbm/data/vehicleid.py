"""``vehicleid``: PKU VehicleID (Liu et al., "Deep Relative Distance Learning: Tell the Difference Between
Similar Vehicles", CVPR 2016). 221,736 surveillance images of 26,267 vehicles (classes).

Protocol (XBM paper seed 002 §4.1, Table 1): ``train_list.txt`` (13,134 vehicles, 110,178 images) trains; one of
the predefined test lists is the test split, leave-one-out retrieval (query = gallery, as the XBM code's
``RetMetric``), chosen by ``vehicleid_test_size``: 800 (small, 7,332 images, the default), 1600 (medium, 12,995)
or 2400 (large, 20,038) vehicles. No super-classes (the release's model attributes cover only part of it).

The source holds the training images and every image of the three test lists, whichever is evaluated: the
decoded-image caches (:mod:`xbm.data.images`, :mod:`xbm.data.cache`) are keyed by data set and root, so the
samples must not depend on ``vehicleid_test_size`` (a sweep over it then shares one cache).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from xbm.config import VEHICLEID_TEST_SIZES
from xbm.data.base import RawData
from xbm.data.layout import check_image, find_file, read_rows, require_root
from xbm.data.sources import ImageFileSource

# Recall@K of the VehicleID papers (Liu et al. 2016; XBM paper seed 002 Table 1); ``eval_ks`` overrides it.
RECALL_KS = (1, 5)

LAYOUT = """\
<data_root>/                              (the VehicleID_V1.0 folder, or its parent)
  train_test_split/train_list.txt         <image_id> <vehicle_id>   (one image a line)
  train_test_split/test_list_800.txt      small test set   (vehicleid_test_size=800)
  train_test_split/test_list_1600.txt     medium test set  (vehicleid_test_size=1600)
  train_test_split/test_list_2400.txt     large test set   (vehicleid_test_size=2400)
  image/0000001.jpg                       <image_id>.jpg
  ..."""

TRAIN_LIST = "train_test_split/train_list.txt"
TEST_LISTS = {size: f"train_test_split/test_list_{size}.txt" for size in VEHICLEID_TEST_SIZES}


def read_list(path: Path) -> list[tuple[str, int]]:
    """``(image_id, vehicle_id)`` per line of a VehicleID list; ValueError naming the file and a bad line."""
    rows = read_rows(path)
    bad = [r for r in rows if len(r) != 2 or not r[1].isdigit()]
    if bad or not rows:
        raise ValueError(f"vehicleid: every line of {path} must be '<image_id> <vehicle_id>' (an integer vehicle "
                         f"id), but got {' '.join(bad[0]) if bad else 'no lines'!r}")
    return [(r[0], int(r[1])) for r in rows]


def build_vehicleid(cfg) -> RawData:
    size = cfg.vehicleid_test_size
    if size not in TEST_LISTS:
        raise ValueError(f"vehicleid_test_size must be one of {list(TEST_LISTS)}, but got {size!r}")
    root = require_root(cfg, "vehicleid", LAYOUT)
    train_file = find_file([root, root / "VehicleID_V1.0"], TRAIN_LIST, "vehicleid", LAYOUT)
    base = train_file.parent.parent
    train = read_list(train_file)
    tests = {n: read_list(find_file([base], relative, "vehicleid", LAYOUT)) for n, relative in TEST_LISTS.items()}
    vehicle_of: dict[str, int] = {}   # every test image, once
    for n, rows in tests.items():
        for image, vehicle in rows:
            if vehicle_of.setdefault(image, vehicle) != vehicle:
                raise ValueError(f"vehicleid: an image must have one vehicle in every test list, but image {image} "
                                 f"is vehicle {vehicle} in {TEST_LISTS[n]} and {vehicle_of[image]} in another")
    shared = sorted({v for _, v in train} & set(vehicle_of.values()))
    if shared:
        raise ValueError(f"vehicleid: the test vehicles must not be training vehicles, but {len(shared)} of them are "
                         f"in {TRAIN_LIST} (e.g. vehicle_id {shared[0]})")
    test_images = sorted(vehicle_of)
    images = [image for image, _ in train] + test_images
    position = {image: len(train) + k for k, image in enumerate(test_images)}
    relpaths = [f"image/{image}.jpg" for image in images]
    check_image(base, relpaths[0], "vehicleid", LAYOUT)
    labels = np.array([v for _, v in train] + [vehicle_of[image] for image in test_images], dtype=np.int64)
    query = np.array([position[image] for image, _ in tests[size]], dtype=np.int64)
    source = ImageFileSource(base, relpaths, dataset="vehicleid", layout=LAYOUT)
    return RawData(name="vehicleid", source=source, labels=labels, train=np.arange(len(train)), query=query)
