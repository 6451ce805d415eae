"""``digits``: scikit-learn's bundled handwritten digits (UCI optical recognition, 1,797 8x8 grey
images, 10 classes), loaded with ``sklearn.datasets.load_digits`` (shipped with scikit-learn, no download).

Protocol: digits 0-4 train, digits 5-9 test (leave-one-out retrieval on unseen classes); no
super-classes. Images are 8x8 grey levels 0-16 scaled to 0-255, strokes high on a 0 background
(:data:`xbm.data.style.STROKES`: one grey channel); the transform upsamples them.
"""
from __future__ import annotations

import numpy as np

from xbm.data.base import RawData
from xbm.data.sources import ArrayImageSource
from xbm.data.style import STROKES

# Recall@K reported here (a test set); ``eval_ks`` overrides it.
RECALL_KS = (1, 10)

NUM_TRAIN_CLASSES = 5


def build_digits(cfg) -> RawData:
    from sklearn.datasets import load_digits  # here: importing scikit-learn takes seconds

    bunch = load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).clip(0, 255).astype(np.uint8)
    labels = bunch.target.astype(np.int64)
    train = labels < NUM_TRAIN_CLASSES
    return RawData(name="digits", source=ArrayImageSource(images), labels=labels,
                   train=np.flatnonzero(train), query=np.flatnonzero(~train), style=STROKES)
