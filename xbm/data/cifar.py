"""``cifar10`` / ``cifar100``: the CIFAR python pickle releases (Krizhevsky, "Learning Multiple Layers of
Features from Tiny Images", 2009). 50,000 training and 10,000 test 32x32 RGB images.

Protocol (as the thesis did, seed 000): the train split trains, the test split is evaluated by
leave-one-out retrieval; classes are shared between the two. CIFAR-100's 20 coarse labels are the
super-classes; CIFAR-10 has none.
"""
from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from xbm.data.base import RawData
from xbm.data.layout import find_file, require_root
from xbm.data.sources import ArrayImageSource
from xbm.errors import BadImageError

# Recall@K reported here (no paper's set adopted); ``eval_ks`` overrides it.
RECALL_KS = (1, 10)

LAYOUT_10 = """\
<data_root>/
  cifar-10-batches-py/           (from cifar-10-python.tar.gz)
    data_batch_1 ... data_batch_5   pickles: {b"data": uint8 [N, 3072], b"labels": [N]}
    test_batch"""
LAYOUT_100 = """\
<data_root>/
  cifar-100-python/              (from cifar-100-python.tar.gz)
    train                        pickle: {b"data": uint8 [N, 3072], b"fine_labels": [N], b"coarse_labels": [N]}
    test"""


def _load(path: Path, dataset: str, root: Path) -> dict:
    try:
        with open(path, "rb") as handle:
            batch = pickle.load(handle, encoding="bytes")
    except Exception as exc:  # truncated or foreign: pickle's errors never name the file
        raise BadImageError.unreadable_file(dataset, path, root, exc) from exc
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in batch.items()}


def _images(batches: list[dict]) -> np.ndarray:
    """Rows of 3072 bytes (R plane, G plane, B plane, each 32x32 row-major) -> uint8 [N, 32, 32, 3]."""
    data = np.concatenate([np.asarray(b["data"], dtype=np.uint8) for b in batches])
    return np.ascontiguousarray(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))


def _raw(name: str, train: list[dict], test: list[dict], label_key: str, super_key: str | None) -> RawData:
    batches = train + test
    labels = np.concatenate([np.asarray(b[label_key], dtype=np.int64) for b in batches])
    supers = None if super_key is None else np.concatenate(
        [np.asarray(b[super_key], dtype=np.int64) for b in batches])
    n_train = sum(len(b[label_key]) for b in train)
    return RawData(name=name, source=ArrayImageSource(_images(batches)), labels=labels,
                   train=np.arange(n_train), query=np.arange(n_train, len(labels)), superlabels=supers)


def build_cifar10(cfg) -> RawData:
    root = require_root(cfg, "cifar10", LAYOUT_10)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    base = find_file([root / "cifar-10-batches-py", root], "test_batch", "cifar10", LAYOUT_10).parent
    batches = [_load(find_file([base], n, "cifar10", LAYOUT_10), "cifar10", root) for n in names]
    return _raw("cifar10", batches[:5], batches[5:], "labels", None)


def build_cifar100(cfg) -> RawData:
    root = require_root(cfg, "cifar100", LAYOUT_100)
    base = find_file([root / "cifar-100-python", root], "test", "cifar100", LAYOUT_100).parent
    train, test = (_load(find_file([base], n, "cifar100", LAYOUT_100), "cifar100", root) for n in ("train", "test"))
    return _raw("cifar100", [train], [test], "fine_labels", "coarse_labels")
