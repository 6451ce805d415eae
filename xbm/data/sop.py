"""``sop``: Stanford Online Products (Oh Song et al., "Deep Metric Learning via Lifted Structured Feature
Embedding", CVPR 2016). 120,053 images, 22,634 products (classes), 12 categories (super-classes).

Protocol: Ebay_train.txt (59,551 images, 11,318 classes) trains; Ebay_test.txt (60,502 images, 11,316
classes; XBM paper seed 002 §4.1) is the test split, leave-one-out retrieval (query = gallery);
``super_class_id`` is the super-class.
"""
from __future__ import annotations

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import check_image, find_file, read_rows, require_root
from xbm.data.sources import ImageFileSource

# Recall@K of the SOP papers (Oh Song et al. 2016; XBM paper seed 002 Table 1); ``eval_ks`` overrides it.
RECALL_KS = (1, 10, 100, 1000)

LAYOUT = """\
<data_root>/                      (the Stanford_Online_Products folder, or its parent)
  Ebay_train.txt                  image_id class_id super_class_id path   (one header line)
  Ebay_test.txt
  bicycle_final/111085122871_0.JPG
  ...
  toaster_final/..."""


def build_sop(cfg) -> RawData:
    root = require_root(cfg, "sop", LAYOUT)
    train_file = find_file([root, root / "Stanford_Online_Products"], "Ebay_train.txt", "sop", LAYOUT)
    base = train_file.parent
    test_file = find_file([base], "Ebay_test.txt", "sop", LAYOUT)
    train_rows, test_rows = read_rows(train_file, skip=1), read_rows(test_file, skip=1)
    rows = train_rows + test_rows
    if not train_rows or not test_rows:
        raise ValueError(f"sop: Ebay_train.txt and Ebay_test.txt must list images, but got "
                         f"{len(train_rows)} and {len(test_rows)} rows under {base}")
    check_image(base, rows[0][3], "sop", LAYOUT)
    labels = np.array([int(r[1]) for r in rows], dtype=np.int64)
    supers = np.array([int(r[2]) for r in rows], dtype=np.int64)
    n_train = len(train_rows)
    source = ImageFileSource(base, [r[3] for r in rows], dataset="sop", layout=LAYOUT)
    return RawData(name="sop", source=source, labels=labels,
                   train=np.arange(n_train), query=np.arange(n_train, len(rows)), superlabels=supers)
