"""Wiring a data set's images for one run: the decoded-image reader, the augmentation preset and the
input statistics (config keys ``augment``, ``normalize``, ``image_cache``; :mod:`xbm.data.augment`).

Decoded images and the data set's statistics are kept per process (:data:`KEEP` entries), so the trials
a Ray actor runs one after another decode a data set once.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Callable, Hashable

from xbm.data.augment import dataset_stats, imagenet_stats, preset, statistics_kind
from xbm.data.base import DatasetSplits
from xbm.data.cache import image_store

KEEP = 2
_kept: "OrderedDict[Hashable, object]" = OrderedDict()


def kept(key: Hashable, make: Callable[[], object]) -> object:
    """``make()``, remembered under ``key`` for the next :data:`KEEP` distinct keys of this process."""
    if key in _kept:
        _kept.move_to_end(key)
        return _kept[key]
    value = make()
    _kept[key] = value
    while len(_kept) > KEEP * 2:  # decoded images and statistics per data set
        _kept.popitem(last=False)
    return value


def data_key(cfg) -> tuple:
    """What identifies a data set's files: its name and where it lives."""
    return cfg.dataset, os.path.realpath(os.path.expanduser(cfg.data_root)) if cfg.data_root else ""


def configure_images(splits: DatasetSplits, cfg) -> None:
    """Give ``splits`` the reader, the per-sample (train, eval) transforms (to uint8 tensors) and the
    per-batch ones (statistics, batch-level augmentation) ``cfg`` asks for; a no-op for vectors."""
    if splits.input_kind != "image":
        return
    chosen = preset(cfg.augment, splits.style)
    load_size = chosen.load_size(cfg.image_size)
    source = splits.train.source
    key = (*data_key(cfg), splits.style, load_size)
    splits.transforms.images = kept(("images", key), lambda: image_store(
        source, splits.style, load_size, {"dataset": cfg.dataset, "root": key[1], "n": len(source),
                                          "mode": splits.style.mode, "invert": splits.style.invert,
                                          "load_size": load_size}, cfg.image_cache))
    channels = splits.style.channels
    kind = statistics_kind(cfg.normalize, splits.style, cfg.pretrained or bool(cfg.pretrained_path))
    if kind == "imagenet":
        stats = imagenet_stats(channels)
    elif kind == "dataset":
        bare = chosen.eval(cfg.image_size)
        train = splits.train
        stats = kept(("stats", key, chosen.name, cfg.image_size, cfg.val_fraction), lambda: dataset_stats(
            lambda i: splits.transforms.images(int(train.indices[i])), len(train), bare))
    else:
        stats = None
    splits.set_transforms(chosen.train(cfg.image_size, stats, channels), chosen.eval(cfg.image_size))
    splits.augment, splits.statistics = chosen.name, stats
    splits.batch_transforms = (chosen.batch_train(stats), chosen.batch_eval(stats))
