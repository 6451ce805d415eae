"""``cars196``: Stanford Cars (Krause et al., "3D Object Representations for Fine-Grained
Categorization", 3dRR 2013). 16,185 images, 196 models.

Protocol (Oh Song et al. 2016; seeds 000/001): classes 1-98 train, classes 99-196 test, leave-one-out
retrieval, whole images (the boxes are not used); no super-classes.
"""
from __future__ import annotations

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import check_image, find_file, require_root
from xbm.data.sources import ImageFileSource

# Recall@K of the Cars196 papers (Oh Song et al. 2016; seeds 000/001); ``eval_ks`` overrides it.
RECALL_KS = (1, 2, 4, 8)

LAYOUT = """\
<data_root>/
  cars_annos.mat                 struct array 'annotations': relative_im_path, bbox_x1..bbox_y2, class (1..196), test
  car_ims/000001.jpg             (from car_ims.tgz)
  ..."""

NUM_TRAIN_CLASSES = 98


def build_cars196(cfg) -> RawData:
    import scipy.io  # here: only this data set needs it

    root = require_root(cfg, "cars196", LAYOUT)
    mat_file = find_file([root, root / "stanford_cars"], "cars_annos.mat", "cars196", LAYOUT)
    base = mat_file.parent
    mat = scipy.io.loadmat(str(mat_file), squeeze_me=True)
    if "annotations" not in mat:
        raise ValueError(f"cars196: {mat_file} must hold a struct array 'annotations', but got variables "
                         f"{sorted(k for k in mat if not k.startswith('__'))}")
    annotations = np.atleast_1d(mat["annotations"])
    relpaths = [str(p) for p in np.atleast_1d(annotations["relative_im_path"]).tolist()]
    labels = np.array([int(c) for c in np.atleast_1d(annotations["class"]).tolist()], dtype=np.int64)
    check_image(base, relpaths[0], "cars196", LAYOUT)
    train = labels <= NUM_TRAIN_CLASSES
    return RawData(name="cars196", source=ImageFileSource(base, relpaths, dataset="cars196", layout=LAYOUT),
                   labels=labels, train=np.flatnonzero(train), query=np.flatnonzero(~train))
