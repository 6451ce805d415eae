"""``cub200``: Caltech-UCSD Birds-200-2011 (Wah et al., CNS-TR-2011-001). 11,788 images, 200 species.

Protocol (Oh Song et al. 2016; seeds 000/001): classes 1-100 train, classes 101-200 test, leave-one-out
retrieval; no super-classes.
"""
from __future__ import annotations

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import check_image, find_file, read_rows, require_root
from xbm.data.sources import ImageFileSource

# Recall@K of the CUB-200 papers (Oh Song et al. 2016; seeds 000/001); ``eval_ks`` overrides it.
RECALL_KS = (1, 2, 4, 8)

LAYOUT = """\
<data_root>/
  CUB_200_2011/                  (from CUB_200_2011.tgz)
    images.txt                   <image_id> <relative path>
    image_class_labels.txt       <image_id> <class_id 1..200>
    images/001.Black_footed_Albatross/Black_Footed_Albatross_0046_18.jpg
    ..."""

NUM_TRAIN_CLASSES = 100


def build_cub200(cfg) -> RawData:
    root = require_root(cfg, "cub200", LAYOUT)
    images_file = find_file([root / "CUB_200_2011", root], "images.txt", "cub200", LAYOUT)
    base = images_file.parent
    labels_file = find_file([base], "image_class_labels.txt", "cub200", LAYOUT)
    paths = {r[0]: r[1] for r in read_rows(images_file)}
    class_of = {r[0]: int(r[1]) for r in read_rows(labels_file)}
    missing = sorted(set(paths) - set(class_of))
    if missing or not paths:
        raise ValueError(f"cub200: every image in {images_file} needs a class in {labels_file}, but "
                         f"{len(missing)} of {len(paths)} have none (e.g. image_id {missing[:1]})")
    ids = sorted(paths, key=int)
    relpaths = [f"images/{paths[i]}" for i in ids]
    check_image(base, relpaths[0], "cub200", LAYOUT)
    labels = np.array([class_of[i] for i in ids], dtype=np.int64)
    train = labels <= NUM_TRAIN_CLASSES
    return RawData(name="cub200", source=ImageFileSource(base, relpaths, dataset="cub200", layout=LAYOUT),
                   labels=labels, train=np.flatnonzero(train), query=np.flatnonzero(~train))
