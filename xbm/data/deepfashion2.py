"""``deepfashion2``: DeepFashion2 consumer-to-shop retrieval (Ge et al., "DeepFashion2", CVPR 2019).

Each image ``<split>/image/NNNNNN.jpg`` has ``<split>/annos/NNNNNN.json`` with ``source`` ("user" or
"shop"), ``pair_id`` and items ``item1..itemN``, each with ``bounding_box`` [x1, y1, x2, y2],
``category_id`` (1-13) and ``style``. One sample = one item's crop. Protocol (the benchmark's retrieval
task): items with ``style > 0`` only; class = (pair_id, category_id, style), kept apart between the two
splits (their pair ids are separate namespaces); super-class = category_id. ``train/`` trains;
``validation/`` is the test split: query = user crops, gallery = shop crops (queries whose class has no
shop crop are dropped, they cannot be retrieved).
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import require_root
from xbm.data.sources import ImageFileSource
from xbm.data.splits import encode
from xbm.errors import DatasetNotFoundError

# Recall@K reported here (no paper's set adopted); ``eval_ks`` overrides it.
RECALL_KS = (1, 10)

LAYOUT = """\
<data_root>/
  train/image/000001.jpg
  train/annos/000001.json       {"source": "user"|"shop", "pair_id": 1, "item1": {"bounding_box": [x1, y1, x2, y2],
  ...                             "category_id": 1, "style": 1, ...}, "item2": ...}
  validation/image/000001.jpg
  validation/annos/000001.json"""

SPLITS = ("train", "validation")


def read_split(root: Path, split: str) -> list[tuple]:
    """(relative image path, box, source, pair_id, category_id, style) for every item with style > 0."""
    annos = root / split / "annos"
    files = sorted(annos.glob("*.json")) if annos.is_dir() else []
    if not files:
        raise DatasetNotFoundError("deepfashion2", annos / "*.json", LAYOUT)
    items = []
    for path in files:
        with open(path, encoding="utf-8") as handle:
            anno = json.load(handle)
        image = f"{split}/image/{path.stem}.jpg"
        for key in sorted(k for k in anno if k.startswith("item")):
            item = anno[key]
            if int(item["style"]) > 0:
                items.append((image, item["bounding_box"], anno["source"], int(anno["pair_id"]),
                              int(item["category_id"]), int(item["style"])))
    return items


def build_deepfashion2(cfg) -> RawData:
    root = require_root(cfg, "deepfashion2", LAYOUT)
    items = [(split, *item) for split in SPLITS for item in read_split(root, split)]
    if not (root / items[0][1]).is_file():
        raise DatasetNotFoundError("deepfashion2", root / items[0][1], LAYOUT)
    split = np.array([i[0] for i in items])
    source_kind = np.array([i[3] for i in items])
    labels = encode([(i[0], i[4], i[5], i[6]) for i in items])
    supers = np.array([i[5] for i in items], dtype=np.int64)
    unknown = set(source_kind.tolist()) - {"user", "shop"}
    if unknown:
        raise ValueError(f"deepfashion2: 'source' must be 'user' or 'shop', but got {sorted(unknown)}")
    source = ImageFileSource(root, [i[1] for i in items], boxes=np.array([i[2] for i in items], dtype=float),
                             dataset="deepfashion2", layout=LAYOUT)
    test = split == "validation"
    return RawData(name="deepfashion2", source=source, labels=labels, train=np.flatnonzero(~test),
                   query=np.flatnonzero(test & (source_kind == "user")),
                   gallery=np.flatnonzero(test & (source_kind == "shop")), superlabels=supers)
