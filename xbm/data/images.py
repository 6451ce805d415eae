"""Wiring a data set's images for one run: the decoded-image reader, the augmentation preset and the
input statistics (config keys ``augment``, ``normalize``, ``image_cache``, ``on_bad_image``;
:mod:`xbm.data.augment`, :mod:`xbm.data.bad_images`).

Decoded images and the data set's statistics are kept per process (:data:`KEEP` entries), so the trials
a Ray actor runs one after another decode a data set once.
"""
from __future__ import annotations

import os
from collections import OrderedDict
from typing import Callable, Hashable

import numpy as np

from xbm.data.augment import dataset_stats, imagenet_stats, preset, statistics_kind
from xbm.data.bad_images import warn_skipped
from xbm.data.base import DatasetSplits
from xbm.data.cache import image_store
from xbm.data.preprocess import Preprocessing
from xbm.data.sources import SampleSource
from xbm.data.style import ImageStyle

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


def _reader_key(style: ImageStyle, cfg) -> tuple:
    # omniglot_rotations: a source of rotated drawings holds other (and more) samples than the drawings'
    return (*data_key(cfg), style, preset(cfg.augment, style).load_size(cfg.image_size), cfg.on_bad_image,
            cfg.omniglot_rotations)


def image_reader(source: SampleSource, style: ImageStyle, cfg):
    """The decoded-image reader of ``source`` for ``cfg`` (kept per process; :func:`image_store`). Under
    ``on_bad_image=skip`` its ``skipped`` names the samples that cannot be decoded (warned once)."""
    key = _reader_key(style, cfg)
    _, root, _, load_size = key[:4]   # the disk cache's key: "n" tells rotated drawings apart

    def make():
        reader = image_store(source, style, load_size, {"dataset": cfg.dataset, "root": root, "n": len(source),
                                                         "mode": style.mode, "invert": style.invert,
                                                         "load_size": load_size}, cfg.image_cache,
                             skip=cfg.on_bad_image == "skip")
        warn_skipped(cfg.dataset, source, reader.skipped)
        return reader
    return kept(("images", key), make)


def configure_images(splits: DatasetSplits, cfg) -> None:
    """Give ``splits`` the reader, the per-sample (train, eval) transforms (to uint8 tensors) and the
    per-batch ones (statistics, batch-level augmentation) ``cfg`` asks for; a no-op for vectors."""
    if splits.input_kind != "image":
        return
    chosen = preset(cfg.augment, splits.style)
    key = _reader_key(splits.style, cfg)
    splits.transforms.images = image_reader(splits.train.source, splits.style, cfg)
    _check_none_skipped(splits, splits.transforms.images.skipped)
    channels = splits.style.channels
    kind = statistics_kind(cfg.normalize, splits.style, cfg.pretrained or bool(cfg.pretrained_path))
    if kind == "imagenet":
        stats = imagenet_stats(channels)
    elif kind == "dataset":
        bare = chosen.eval(cfg.image_size)
        train = splits.train
        stats = kept(("stats", key, chosen.name, cfg.image_size, cfg.val_fraction, cfg.val_by, cfg.train_on), lambda: dataset_stats(
            lambda i: splits.transforms.images(int(train.indices[i])), len(train), bare))
    else:
        stats = None
    # Evaluation's whole input path (decode as the reader does, eval geometry, statistics): one object.
    prep = Preprocessing(mode=splits.style.mode, invert=splits.style.invert,
                         load_size=chosen.load_size(cfg.image_size), image_size=cfg.image_size, preset=chosen.name,
                         mean=None if stats is None else stats.mean, std=None if stats is None else stats.std)
    splits.set_transforms(chosen.train(cfg.image_size, stats, channels), prep.eval_transform())
    splits.augment, splits.statistics, splits.preprocessing = chosen.name, stats, prep
    splits.batch_transforms = (chosen.batch_train(stats), prep.batch_norm())


def _check_none_skipped(splits: DatasetSplits, skipped) -> None:
    """Splits built elsewhere (``Trainer(cfg, splits=...)``) must not use a sample the reader left out."""
    if not skipped:
        return
    parts = [splits.train, splits.test.query, splits.test.gallery] + ([splits.val.query] if splits.val else [])
    used = np.concatenate([p.indices for p in parts if p is not None])
    if np.isin(used, skipped).any():
        raise ValueError(f"on_bad_image=skip: these splits use images that cannot be decoded "
                         f"({len(skipped)} in {splits.name!r}): build them with build_dataset(cfg)")
