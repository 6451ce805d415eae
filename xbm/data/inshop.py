"""``inshop``: DeepFashion In-Shop Clothes Retrieval (Liu et al., "DeepFashion", CVPR 2016).
52,712 images, 7,982 items (classes): 3,997 train (25,882 images), 3,985 evaluated with 14,218 queries
against a 12,612-image gallery.

Protocol: ``item_id`` is the class; ``evaluation_status`` train/query/gallery picks the part; the
super-class is ``<GENDER>/<Category>`` from the image path ``img/<GENDER>/<Category>/id_xxx/...``
(23 garment groups: MEN/Denim and WOMEN/Denim differ), taken from each item's first image.
"""
from __future__ import annotations

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import check_image, find_file, read_rows, require_root
from xbm.data.sources import ImageFileSource
from xbm.data.splits import encode

# Recall@K of the In-Shop papers (Liu et al. 2016; XBM paper seed 002 Table 1); ``eval_ks`` overrides it.
RECALL_KS = (1, 10, 20, 30, 40, 50)

LAYOUT = """\
<data_root>/                      (the "In-shop Clothes Retrieval Benchmark" folder)
  Eval/list_eval_partition.txt    line 1: count; line 2: image_name item_id evaluation_status
  img/WOMEN/Dresses/id_00000002/02_1_front.jpg     (or Img/img/..., from Img/img.zip)
  ...
  img/MEN/Denim/..."""

STATUSES = ("train", "query", "gallery")


def build_inshop(cfg) -> RawData:
    root = require_root(cfg, "inshop", LAYOUT)
    partition = find_file([root, root / "In-shop Clothes Retrieval Benchmark"],
                          "Eval/list_eval_partition.txt", "inshop", LAYOUT)
    base = partition.parent.parent
    rows = read_rows(partition, skip=2)
    bad = [r for r in rows if len(r) != 3 or r[2] not in STATUSES]
    if bad or not rows:
        raise ValueError(f"inshop: every row of {partition} must be 'image_name item_id status' with status "
                         f"in {list(STATUSES)}, but got {bad[0] if bad else 'no rows'}")
    paths = [r[0] for r in rows]
    if not (base / paths[0]).is_file() and (base / "Img" / paths[0]).is_file():
        base = base / "Img"  # images extracted inside Img/, as the release ships img.zip there
    check_image(base, paths[0], "inshop", LAYOUT)
    labels = encode([r[1] for r in rows])
    first_category: dict[int, str] = {}
    for label, path in zip(labels.tolist(), paths):
        first_category.setdefault(label, "/".join(path.split("/")[1:3]))
    supers = encode([first_category[label] for label in labels.tolist()])
    status = np.array([r[2] for r in rows])
    source = ImageFileSource(base, paths, dataset="inshop", layout=LAYOUT)
    return RawData(name="inshop", source=source, labels=labels, train=np.flatnonzero(status == "train"),
                   query=np.flatnonzero(status == "query"), gallery=np.flatnonzero(status == "gallery"),
                   superlabels=supers)
